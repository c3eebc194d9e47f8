"""A real one-node SLURM cluster started by the test (slurm_cluster.py), and an sbatch job
running a scenario both ways: srun --ntasks-per-node=1 distrun --launcher slurm, and srun
distrun-worker."""
import os
import subprocess
import sys

from launcher_harness import DATA, PYTHON, check, main, DISTRUN, WORKER
from slurm_cluster import one_node_cluster


def test():
    with one_node_cluster() as (env, d):
        scenario = os.path.join(DATA, "all_reduce_4.yaml")
        agent_cmd = (f"srun --ntasks-per-node=1 {DISTRUN} --launcher slurm --nproc-per-node 4 --rdzv-timeout 60 "
                     f"-- {PYTHON} -c \"import os; print('ENV', os.environ['RANK'], os.environ['WORLD_SIZE'])\"")
        jobs = {"agent-program": agent_cmd}
        if os.access(WORKER, os.X_OK):
            jobs["agent-scenario"] = f"srun --ntasks-per-node=1 {DISTRUN} --launcher slurm --nproc-per-node 4 {scenario}"
            jobs["direct"] = f"srun --ntasks-per-node=4 --overcommit {WORKER} {scenario}"
        for name, cmd in jobs.items():
            out = f"{d}/{name}.out"
            # One task per agent; the direct way asks for 4 tasks, overcommitted on a small host.
            size = ["-n4", "--overcommit"] if name == "direct" else ["-n1"]
            try:
                r = subprocess.run(["sbatch", "--parsable", "--wait", "-N1", *size, "-o", out, "--wrap", cmd], env=env,
                                   capture_output=True, text=True, timeout=90)
            except subprocess.TimeoutExpired:
                q = subprocess.run(["squeue", "-h", "-o", "%i %T %r"], env=env, capture_output=True, text=True, timeout=10)
                subprocess.run(["scancel", "-u", "root"], env=env, capture_output=True, timeout=10)
                check(False, f"sbatch {name}: no result in 90 s; squeue: {q.stdout.strip()}")
            text = open(out).read() if os.path.exists(out) else ""
            check(r.returncode == 0, f"sbatch {name}: rc {r.returncode}", r.stderr + text)
            if name == "agent-program":
                seen = sorted(l for l in text.splitlines() if "ENV " in l)
                check(len(seen) == 4 and all(l.endswith(" 4") for l in seen), f"{name}: four ranks", text)
            else:
                check("Rank 3 after all_reduce" in text, f"{name}: results", text)
        if not os.access(WORKER, os.X_OK):
            print(f"note: {WORKER} not built; only the program job ran")


if __name__ == "__main__":
    sys.argv[1:] = ["slurm"]
    main({"slurm": test})

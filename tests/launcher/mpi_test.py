"""Open MPI: distrun-worker started directly by mpirun, and one distrun agent per MPI rank
(--launcher mpi) taking its node rank and master from Open MPI's variables."""
import os
import shutil
import sys

from launcher_harness import DATA, PYTHON, check, main, run, skip, DISTRUN, WORKER

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
DUMP = "import os; print('ENV', os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['GROUP_RANK'], flush=True)"


def test():
    if not shutil.which("mpirun"):
        skip("mpirun not found (openmpi-bin; scripts/deps.sh test)")
    # One host: never try ssh. Several agents need a job secret; mpirun hands our environment on.
    env = {"OMPI_MCA_plm_rsh_agent": "false", "DISTRUN_STORE_SECRET": os.urandom(16).hex()}
    # One agent per MPI rank ("node"), two workers each.
    r = run([*MPIRUN, "-np", "2", DISTRUN, "--launcher", "mpi", "--nproc-per-node", "2", "--rdzv-timeout", "30",
             "--", PYTHON, "-c", DUMP], timeout=120, env=env)
    check(r.returncode == 0, f"distrun --launcher mpi: rc {r.returncode}", r.stdout + r.stderr)
    seen = sorted(l.split("ENV ", 1)[1] for l in r.stdout.splitlines() if "ENV " in l)
    check(seen == [f"{k} 4 {k // 2}" for k in range(4)], f"ranks: {seen}", r.stdout)
    if not os.access(WORKER, os.X_OK):
        skip(f"--launcher mpi passed; distrun-worker under mpirun not run: {WORKER} not built")
    r = run([*MPIRUN, "-np", "4", WORKER, os.path.join(DATA, "all_reduce_4.yaml")], timeout=120, env=env)
    check(r.returncode == 0 and "Rank 3" in r.stdout, f"mpirun distrun-worker: rc {r.returncode}", r.stdout + r.stderr)


if __name__ == "__main__":
    sys.argv[1:] = ["mpi"]
    main({"mpi": test})

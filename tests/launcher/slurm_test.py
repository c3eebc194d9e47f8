"""A real one-node SLURM cluster started by the test (munged, slurmctld, slurmd as root, with a
generated slurm.conf in a temp dir), and an sbatch job running a scenario both ways:
srun --ntasks-per-node=1 distrun --launcher slurm, and srun distrun-worker. Daemons stopped
at the end whatever happens."""
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from launcher_harness import DATA, PYTHON, check, free_port, main, skip, DISTRUN, WORKER

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    skip(f"SLURM: {what} within {timeout}s")


def test():
    if os.geteuid() != 0:
        skip("needs root to start munged, slurmctld and slurmd")
    for prog in ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol"):
        if not shutil.which(prog) and not os.path.exists(f"/usr/sbin/{prog}"):
            skip(f"{prog} not found (slurm-wlm, munge; scripts/deps.sh test)")
    host = socket.gethostname().split(".")[0]
    cpus = os.cpu_count()
    d = tempfile.mkdtemp(prefix="distrun-slurm-")
    daemons = []
    try:
        munge_key = f"{d}/munge.key"
        with open(munge_key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(munge_key, 0o400)
        os.makedirs(f"{d}/munge", mode=0o700)
        munge_sock = f"{d}/munge/munge.socket"
        daemons.append(subprocess.Popen(["munged", "--foreground", "--force", f"--key-file={munge_key}",
                                         f"--socket={munge_sock}", f"--pid-file={d}/munged.pid",
                                         f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        wait_for(lambda: os.path.exists(munge_sock), 10, "munged did not start")
        ctld_port, d_port = free_port(), free_port()
        # A random first job id: ports derived from job ids then differ between runs of this
        # test on one host (each run's slurmctld would otherwise start again at job 1).
        conf = f"""ClusterName=distrun{os.getpid()}
FirstJobId={random.randint(1000, 900000)}
SlurmctldHost={host}
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_sock}
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName={host} CPUs={cpus} State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""
        os.makedirs(f"{d}/state")
        os.makedirs(f"{d}/spool")
        with open(f"{d}/slurm.conf", "w") as f:
            f.write(conf)
        env = dict(os.environ, SLURM_CONF=f"{d}/slurm.conf")
        daemons.append(subprocess.Popen(["slurmctld", "-D", "-i", "-f", f"{d}/slurm.conf"], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        daemons.append(subprocess.Popen(["slurmd", "-D", "-f", f"{d}/slurm.conf"], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        def node_idle():
            r = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=10)
            return r.returncode == 0 and r.stdout.strip() in ("idle", "mix")

        if not wait_for(lambda: any(p.poll() is not None for p in daemons) or node_idle(), 30, "node not idle"):
            pass
        for p, name in zip(daemons, ("munged", "slurmctld", "slurmd")):
            if p.poll() is not None:
                logs = ""
                for log in ("slurmctld.log", "slurmd.log"):
                    if os.path.exists(f"{d}/{log}"):
                        logs += open(f"{d}/{log}").read()[-1500:]
                skip(f"SLURM: {name} exited with {p.returncode} here: {logs.strip()[-600:]}")

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
    finally:
        for p in reversed(daemons):
            p.terminate()
        for p in reversed(daemons):
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    sys.argv[1:] = ["slurm"]
    main({"slurm": test})

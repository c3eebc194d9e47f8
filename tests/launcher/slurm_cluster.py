"""A real one-node SLURM cluster for a test: munged, slurmctld and slurmd as root, with a
generated slurm.conf in a temp dir; stopped at the end whatever happens. SLURM's daemons are
global to the machine: run the test under `flock /tmp/distrun-slurm.lock`."""
import contextlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

from launcher_harness import free_port, skip


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    skip(f"SLURM: {what} within {timeout}s")


@contextlib.contextmanager
def one_node_cluster():
    """Yields (env with SLURM_CONF, the cluster's temp dir); skips (exit 77) when SLURM cannot
    run here."""
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

        yield env, d
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



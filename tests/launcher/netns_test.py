"""Two hosts as two network namespaces joined by a veth pair (192.0.2.1 and 192.0.2.2, the
documentation range, only inside namespaces this test makes): one distrun per "host", static
rendezvous on node 0, workers meeting across the link. Needs root and `ip netns`."""
import os
import shutil
import subprocess
import sys

from launcher_harness import DATA, PYTHON, Failed, check, main, skip, DISTRUN, WORKER

TAG = f"drt{os.getpid() % 100000}"
NS = [f"{TAG}a", f"{TAG}b"]
ADDR = ["192.0.2.1", "192.0.2.2"]
VETH = [f"{TAG}v0", f"{TAG}v1"]
SECRET = {"DISTRUN_STORE_SECRET": os.urandom(16).hex()}
DUMP = "import os; print('ENV', os.environ['RANK'], os.environ['WORLD_SIZE'], os.environ['GROUP_RANK'], os.environ['MASTER_ADDR'], flush=True)"


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def setup():
    for ns in NS:
        ip("netns", "add", ns)
    ip("link", "add", VETH[0], "type", "veth", "peer", "name", VETH[1])
    for i in (0, 1):
        ip("link", "set", VETH[i], "netns", NS[i])
        ip("-n", NS[i], "addr", "add", ADDR[i] + "/24", "dev", VETH[i])
        ip("-n", NS[i], "link", "set", VETH[i], "up")
        ip("-n", NS[i], "link", "set", "lo", "up")


def teardown():
    for ns in NS:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)


def two_nodes(cmd, extra_env=None, timeout=90):
    """Starts distrun on both namespaces; returns [(rc, out, err)] for node 0 and 1."""
    common = ["--nnodes", "2", "--nproc-per-node", "2", "--master-addr", ADDR[0], "--master-port", "29400",
              "--rdzv-timeout", "30"]
    procs = []
    for k in (1, 0):  # node 1 first: it must wait for node 0, not fail
        # The two namespaces share one kernel, so the single-copy path between processes of one
        # host would carry the data past the veth pair: turn it off to test the network path.
        env = dict(os.environ, DISTRUN_CMA="0", **SECRET, **(extra_env(k) if extra_env else {}))
        procs.append(subprocess.Popen(["ip", "netns", "exec", NS[k], DISTRUN, *common, "--node-rank", str(k), *cmd],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    results = [p.communicate(timeout=timeout) for p in procs]
    return [(procs[1].returncode, *results[1]), (procs[0].returncode, *results[0])]


def test():
    if os.geteuid() != 0:
        skip("needs root to create network namespaces")
    if not shutil.which("ip") or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        skip("`ip netns` is not available (iproute2, or no permission for namespaces here)")
    try:
        try:
            setup()
        except subprocess.CalledProcessError as e:
            skip(f"cannot create namespaces/veth here: {e.stderr.decode().strip()}")
        # The torchrun environment across the two hosts.
        res = two_nodes(["--", PYTHON, "-c", DUMP])
        out = "".join(r[1] for r in res)
        check(all(r[0] == 0 for r in res), "both nodes succeed", str(res))
        seen = sorted(l.split("ENV ", 1)[1] for l in out.splitlines() if "ENV " in l)
        check(seen == [f"{r} 4 {r // 2} 192.0.2.1" for r in range(4)], f"ranks across hosts: {seen}", out)
        # Real collectives across the link: distrun-worker when built, and PyTorch over gloo.
        if os.access(WORKER, os.X_OK):
            res = two_nodes([os.path.join(DATA, "all_reduce_4.yaml")])
            check(all(r[0] == 0 for r in res), "scenario across two hosts", str(res))
            check("Rank 3" in res[0][1], "rank 0 prints every rank's result", res[0][1])
        else:
            print(f"note: {WORKER} not built; scenario part not run")
        if subprocess.run([PYTHON, "-c", "import torch.distributed"], capture_output=True).returncode == 0:
            res = two_nodes(["--", PYTHON, os.path.join(DATA, "torch_allreduce.py")],
                            extra_env=lambda k: {"GLOO_SOCKET_IFNAME": VETH[k]}, timeout=180)
            check(all(r[0] == 0 for r in res), "PyTorch gloo across two hosts", str(res))
            check("all_reduce ok: 10.0" in res[0][1], "sum across hosts", res[0][1])
        # A node that never comes is named by node 0.
        r = subprocess.run(["ip", "netns", "exec", NS[0], DISTRUN, "--nnodes", "2", "--node-rank", "0", "--master-addr",
                            ADDR[0], "--master-port", "29401", "--rdzv-timeout", "1", "--", "true"],
                           capture_output=True, text=True, timeout=30, env=dict(os.environ, **SECRET))
        check(r.returncode == 1 and "node(s) 1 of 2 never joined" in r.stderr, "missing node named", r.stderr)
    finally:
        teardown()


if __name__ == "__main__":
    sys.argv[1:] = ["netns"]
    main({"netns": test})

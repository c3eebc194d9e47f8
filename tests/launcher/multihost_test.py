"""Several hosts that share one fate, as network namespaces: two (or three) "hosts" joined by a
bridge, one distrun agent per host, real workers (with children of their own) and real
signals. Each case makes its own namespaces (names carry this process's pid), checks the exit
statuses and the summary every agent prints, and checks the process table afterwards. Cases
that measure how long a failure takes to stop every node print `MEASURE` lines (reported,
not asserted: timing targets belong to benchmarks). Needs root and `ip netns`."""
import contextlib
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

from launcher_harness import DATA, DISTRUN, PYTHON, WORKER, Failed, check, main, need_worker, processes_with, skip

TAG = f"dmh{os.getpid() % 100000}"
# A program whose rank 3 calls all_gather where the others call all_reduce (tests/faults).
MISMATCH = os.environ.get("MISMATCH", "")
# A relay that records a job's store frames and replays and alters them (tests/unit/frame_relay.cpp).
FRAME_RELAY = os.environ.get("FRAME_RELAY", "")
ADDR = ["192.0.2.1", "192.0.2.2", "192.0.2.3", "192.0.2.4"]
PORT = "29400"  # inside namespaces made for this run only: no other test can hold it
SECRET = os.urandom(16).hex()

# A worker: starts a grandchild in a session of its own (out of reach of process-group
# kills), says ready, then either fails (RANK == FAIL_RANK, after FAIL_AFTER s, writing the
# time it fails to FAIL_FILE) or sleeps far longer than any case runs.
WORKER_PY = r"""
import os, subprocess, sys, time
mark = sys.argv[1]
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", mark], start_new_session=True)
print("ready", os.environ["RANK"], flush=True)
if os.environ["RANK"] == os.environ.get("FAIL_RANK"):
    time.sleep(float(os.environ.get("FAIL_AFTER", "1")))
    with open(os.environ["FAIL_FILE"], "w") as f:
        f.write(repr(time.time()))
    sys.exit(3)
time.sleep(120)
"""


def ip(*args):
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


class Hosts:
    """`n` namespaces on one bridge (in a namespace of its own, so nothing touches the host)."""

    def __init__(self, n):
        self.ns = [f"{TAG}h{k}" for k in range(n)]
        self.hub = f"{TAG}hub"

    def __enter__(self):
        if os.geteuid() != 0:
            skip("needs root to create network namespaces")
        if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
            skip("`ip netns` is not available here")
        try:
            ip("netns", "add", self.hub)
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "link", "set", "br0", "up")
            for k, ns in enumerate(self.ns):
                ip("netns", "add", ns)
                ip("-n", self.hub, "link", "add", f"p{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("-n", self.hub, "link", "set", f"p{k}", "master", "br0", "up")
                ip("-n", ns, "addr", "add", ADDR[k] + "/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            self.__exit__()
            skip(f"cannot create namespaces/veth/bridge here: {e.stderr.decode().strip()}")
        return self

    def __exit__(self, *exc):
        for ns in [*self.ns, self.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)

    def agent(self, k, nnodes, args, env=None, secret=SECRET, extra=(), rdzv_timeout=20, hostname=None,
              master=ADDR[0]):
        """Starts distrun as node `k` on host `k` (ip netns exec execs it: the pid is distrun's),
        under a host name of its own when `hostname` is given (a UTS namespace; the namespaces
        otherwise share the machine's name), reaching node 0 at `master`."""
        full = dict(os.environ, DISTRUN_CMA="0", **(env or {}))
        full.pop("DISTRUN_STORE_SECRET", None)
        if secret is not None:
            full["DISTRUN_STORE_SECRET"] = secret
        named = ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', hostname] if hostname else []
        cmd = ["ip", "netns", "exec", self.ns[k], *named, DISTRUN, "--nnodes", str(nnodes), "--node-rank", str(k),
               "--nproc-per-node", "2", "--master-addr", master, "--master-port", PORT, "--rdzv-timeout", str(rdzv_timeout),
               "--stop-grace", "1", *extra, *args]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


def finish(procs, timeout=40):
    """[(rc, out, err)] of every agent, in node order."""
    out = []
    for p in procs:
        try:
            o, e = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            o, e = p.communicate()
            raise Failed(f"an agent did not end within {timeout} s\n{o}\n{e}")
        out.append((p.returncode, o, e))
    return out


def wait_for_processes(mark, count, within=30):
    deadline = time.time() + within
    while len(processes_with(mark)) < count:
        if time.time() > deadline:
            raise Failed(f"only {processes_with(mark)} of {count} processes started")
        time.sleep(0.05)


def stopped_at(mark, within=30, agents=()):
    """The time at which no process carrying `mark` is left (fails after `within` s, with what
    each of `agents` said)."""
    deadline = time.time() + within
    while processes_with(mark):
        if time.time() > deadline:
            left = processes_with(mark)
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            said = []
            for k, p in enumerate(agents):
                running = p.poll() is None
                if running:
                    p.kill()
                o, e = p.communicate()
                said.append(f"node {k}'s agent ({'still running' if running else f'rc {p.returncode}'}):\n{o}{e}")
            raise Failed(f"processes left behind: {left}" + "".join("\n--- " + s for s in said))
        time.sleep(0.02)
    return time.time()


def first_failure(err):
    lines = [l for l in err.splitlines() if "first failure:" in l]
    return lines[0] if lines else None


def workers(mark, env=None):
    return ["--", PYTHON, "-c", WORKER_PY, mark]


def measure(name, seconds):
    print(f"MEASURE {name}: {seconds:.2f} s from the failure to no worker (or worker's child) left on any node",
          flush=True)


def worker_fails(failing_node):
    """A worker on `failing_node` exits 3: every node stops, both agents exit 1, one summary."""
    mark = f"{TAG}-wf{failing_node}"
    rank = 2 * failing_node + 1
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        fail_file = os.path.join(d, "failed_at")
        env = {"FAIL_RANK": str(rank), "FAIL_FILE": fail_file, "FAIL_AFTER": "2"}
        procs = [h.agent(k, 2, workers(mark), env=env) for k in (0, 1)]
        wait_for_processes(mark, 8)
        end = stopped_at(mark)
        res = finish(procs)
        with open(fail_file) as f:
            failed = float(f.read())
        measure(f"worker exit on node {failing_node}", end - failed)
        check([r[0] for r in res] == [1, 1], f"both agents exit 1: {[r[0] for r in res]}", str(res))
        lines = [first_failure(r[2]) for r in res]
        check(lines[0] is not None and lines[0] == lines[1], "the same summary on every node", str(lines))
        check(f"node rank {failing_node}, rank {rank}:" in lines[0] and "exit code 3" in lines[0],
              "the summary names node, rank and cause", lines[0])
        check(not any("giving up after" in r[2] for r in res), "no restart talk without --max-restarts", str(res))
    stopped_at(mark, within=3)


def case_worker_fails_on_node0():
    worker_fails(0)


def case_worker_fails_on_node1():
    worker_fails(1)
    # The flight recorder across nodes: rank 3 (node 1) calls all_gather #5 while ranks 0 and
    # 1 (node 0) and 2 (node 1) call all_reduce #5. Every node's summary has one line per rank
    # of the whole job and names rank 3, node 0's included.
    if not os.access(MISMATCH, os.X_OK):
        print(f"note: MISMATCH={MISMATCH!r} is not built: the flight recorder part is not run", flush=True)
        return
    with Hosts(2) as h:
        procs = [h.agent(k, 2, ["--", MISMATCH, "op", "5000"]) for k in (0, 1)]
        res = finish(procs)
        check([r[0] for r in res] == [1, 1], f"both agents exit 1: {[r[0] for r in res]}", str(res))
        want = "first mismatch: rank 3 in all_gather #5 while the others are in all_reduce #5"
        for k, (_, _, err) in enumerate(res):
            table = [l for l in err.splitlines() if re.match(r"  rank \d+: ", l)]
            check(sorted(l.split(":")[0] for l in table) == [f"  rank {r}" for r in range(4)],
                  f"node {k}'s flight table has one line per rank of the job", err)
            check(any(l.startswith("  rank 3: all_gather #5 ") for l in table), f"node {k} shows rank 3's collective",
                  err)
            check(want in err, f"node {k}'s summary names rank 3, on node 1", err)
            check("no report from node" not in err, f"node {k} got every node's report", err)
        print(next(l for l in res[0][2].splitlines() if "first mismatch" in l).strip(), flush=True)


def frozen_rank_3(mark, heartbeat, gives_up, extra=()):
    """Rank 3 (node 1) stops itself at its start; with `gives_up`, rank 1 (node 0) exits 1 after
    waiting 2 s for it. Every node must print the same line naming the frozen rank 3 on node 1;
    returns the seconds from the start until both agents ended, and their stderr."""
    script = 'if [ "$RANK" = 3 ]; then kill -STOP $$; fi; '
    if gives_up:
        script += 'if [ "$RANK" = 1 ]; then sleep 2; echo "rank 1: no answer from rank 3" >&2; exit 1; fi; '
    script += "sleep 60 # " + mark
    with Hosts(2) as h:
        t0 = time.time()
        procs = [h.agent(k, 2, ["--", "sh", "-c", script],
                         extra=["--rdzv-conf", f"heartbeat_timeout={heartbeat}", *extra]) for k in (0, 1)]
        res = finish(procs, timeout=40)
        took = time.time() - t0
        check([r[0] for r in res] == [1, 1], f"both agents exit 1: {[r[0] for r in res]}", str(res))
        same_frozen_line(res, node=1, rank=3)
    stopped_at(mark, within=3)
    return took, [r[2] for r in res]


def same_frozen_line(res, node, rank):
    lines = [first_failure(r[2]) for r in res]
    check(lines[0] is not None and len(set(lines)) == 1, "the same summary on every node", str(lines))
    check(f"node rank {node}, rank {rank}:" in lines[0] and "frozen, not ended" in lines[0],
          f"the summary names the frozen rank {rank} on node {node}", lines[0])


def case_stopped_rank_on_node1():
    """A program's rank 3 (node 1) is frozen while the others wait for it (no timeout of their
    own): node 1's agent names it as stopped after the heartbeat timeout (2 s here), not at the
    rendezvous timeout, and every node stops with the same line."""
    took, _ = frozen_rank_3(f"{TAG}-stop", 2, gives_up=False)
    print(f"MEASURE a frozen rank on node 1: {took:.2f} s from the start until both agents ended "
          f"(heartbeat timeout 2 s)", flush=True)
    check(took < 20, f"after the heartbeat timeout, not the 20 s rendezvous timeout: {took:.2f} s")


def case_frozen_rank_named_first():
    """Rank 3 (node 1) is frozen; rank 1 (node 0) gives up waiting for it after 2 s and exits 1,
    long before the heartbeat timeout (30 s) would name rank 3. Every node's failure line
    names the frozen rank 3 on node 1, not rank 1 that failed because of it."""
    took, _ = frozen_rank_3(f"{TAG}-gaveup", 30, gives_up=True)
    print(f"MEASURE rank 1 gives up on frozen rank 3 (2 s): {took:.2f} s from the start until both agents ended",
          flush=True)
    check(took < 20, f"long before the 30 s heartbeat timeout: {took:.2f} s")


def case_frozen_rank_named_on_restart():
    """As above with --max-restarts 1: each node says why the workers restart, naming the first
    failure (the frozen rank 3 on node 1's own node too), not rank 1 that gave up on it."""
    _, errs = frozen_rank_3(f"{TAG}-gaveupr", 30, gives_up=True, extra=["--max-restarts", "1"])
    check("rank 3 was frozen; restarting all workers (restart 1 of 1)" in errs[1],
          "node 1 names its frozen rank 3 as the reason for the restart", errs[1])
    check("another node failed; restarting all workers (restart 1 of 1)" in errs[0],
          "node 0 names another node, not its rank 1 that gave up", errs[0])


@contextlib.contextmanager
def agent_held(pid):
    """Holds an agent's main thread still without a signal (ptrace: PTRACE_SEIZE, then
    PTRACE_INTERRUPT): a SIGSTOP would end in a SIGCONT, which distrun passes on to its workers,
    a frozen one included."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    seize, interrupt, detach, wall = 0x4206, 0x4207, 17, 0x40000000
    if libc.ptrace(seize, pid, None, None) != 0:
        skip(f"cannot ptrace the agent here: {os.strerror(ctypes.get_errno())}")
    try:
        libc.ptrace(interrupt, pid, None, None)
        os.waitpid(pid, wall)  # its stop
        yield
    finally:
        libc.ptrace(detach, pid, None, None)


def gives_up_on_frozen(d, frozen, mark):
    """A script whose ranks say they started ($d/upRANK); rank `frozen` then stops itself, and
    rank 1 gives up on it after 2 s ($d/gave_up) and exits 1."""
    return (f': > {d}/up$RANK; if [ "$RANK" = {frozen} ]; then kill -STOP $$; fi; '
            f'if [ "$RANK" = 1 ]; then sleep 2; : > {d}/gave_up; exit 1; fi; sleep 60 # {mark}')


def hold_past_give_up(procs, d, ranks, pid, before=lambda: None, then=lambda: None):
    """Once `ranks` ranks started and `before()` returned, holds the agent `pid()` still
    (agent_held) from before rank 1 gives up until `then()` returns after it; every agent is
    killed if anything fails meanwhile."""
    try:
        deadline = time.time() + 20
        while len([f for f in os.listdir(d) if f.startswith("up")]) < ranks:
            check(time.time() < deadline and all(p.poll() is None for p in procs), f"{ranks} ranks start")
            time.sleep(0.02)
        before()
        with agent_held(pid()):
            while not os.path.exists(os.path.join(d, "gave_up")):
                check(time.time() < deadline + 20, "rank 1 gives up")
                time.sleep(0.02)
            then()
    except BaseException:
        for p in procs:
            p.kill()
        raise


def case_frozen_rank_named_first_of_three():
    """Three nodes: rank 5 (node 2) is frozen and rank 1 (node 0) gives up on it after 2 s,
    while node 2's agent is itself held still until past the 2 s that the others wait for its
    flight report, so it replaces rank 1's record late. Every node still prints the same line,
    naming the frozen rank 5 on node 2."""
    mark = f"{TAG}-gaveup3"
    t0 = time.time()
    with Hosts(3) as h, tempfile.TemporaryDirectory() as d:
        procs = [h.agent(k, 3, ["--", "sh", "-c", gives_up_on_frozen(d, 5, mark)],
                         extra=["--rdzv-conf", "heartbeat_timeout=30"]) for k in range(3)]
        hold_past_give_up(procs, d, 6, lambda: procs[2].pid, then=lambda: time.sleep(2.8))
        res = finish(procs)
        print(f"MEASURE rank 1 gives up on frozen rank 5 (node 2's agent held 2.8 s past it): {time.time() - t0:.2f} s "
              "from the start until the three agents ended", flush=True)
        check([r[0] for r in res] == [1, 1, 1], f"every agent exits 1: {[r[0] for r in res]}", str(res))
        same_frozen_line(res, node=2, rank=5)
    stopped_at(mark, within=3)


def case_frozen_node_reads_late():
    """Rank 3 (node 1) is frozen and rank 1 (node 0) gives up on it after 2 s, while node 1's
    agent is held still until node 0's agent has ended: node 0 settles the record without node
    1 (rank 1's) and takes its store with it. Node 1, back, finds the store gone, yet prints the
    same first failure as node 0 (its listener kept the settled record), not the lost store."""
    mark = f"{TAG}-late-reader"
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        procs = [h.agent(k, 2, ["--", "sh", "-c", gives_up_on_frozen(d, 3, mark)],
                         extra=["--rdzv-conf", "heartbeat_timeout=30"]) for k in (0, 1)]

        def listening():  # node 1's agent watches through its listener, parked on its connection to node 0
            deadline = time.time() + 20
            while subprocess.run(["ip", "netns", "exec", h.ns[1], "ss", "-tnH", "state", "established"],
                                 capture_output=True, text=True).stdout.count(f"{ADDR[0]}:{PORT}") < 1:
                check(time.time() < deadline, "node 1's agent is connected to node 0")
                time.sleep(0.02)
            # The listener's thread starts before the workers do (at the end of the meeting), and
            # its wait is one request: long sent by now, with a margin for a loaded machine.
            time.sleep(0.5)

        hold_past_give_up(procs, d, 4, lambda: procs[1].pid, before=listening, then=lambda: procs[0].wait(timeout=30))
        node0_ended = time.time()
        res = finish(procs)
        print(f"MEASURE node 1's agent held until node 0 ended: node 0 ended at most "
              f"{node0_ended - os.path.getmtime(os.path.join(d, 'gave_up')):.2f} s after rank 1 gave up, node 1 "
              f"{time.time() - node0_ended:.2f} s after its release", flush=True)
        check([r[0] for r in res] == [1, 1], f"both agents exit 1: {[r[0] for r in res]}", str(res))
        lines = [first_failure(r[2]) for r in res]
        check(lines[0] is not None and len(set(lines)) == 1, "the same first failure on every node", str(lines))
        check("node rank 0, rank 1:" in lines[0], "the record node 0 settled: rank 1", lines[0])
    stopped_at(mark, within=3)


def case_agent_sigterm():
    """SIGTERM to node 1's agent: it stops its workers and exits 143; node 0 stops too, exit 1."""
    mark = f"{TAG}-term"
    with Hosts(2) as h:
        procs = [h.agent(k, 2, workers(mark)) for k in (0, 1)]
        wait_for_processes(mark, 8)
        t0 = time.time()
        procs[1].send_signal(signal.SIGTERM)
        end = stopped_at(mark)
        res = finish(procs)
        measure("SIGTERM to node 1's agent", end - t0)
        check([r[0] for r in res] == [1, 1], f"rc {[r[0] for r in res]}", str(res))
        lines = [first_failure(r[2]) for r in res]
        check(lines[0] is not None and lines[0] == lines[1], "the same summary on every node", str(lines))
        check("node rank 1: distrun stopped by SIGTERM" in lines[0], "names the stopped agent", lines[0])
    stopped_at(mark, within=3)


def agent_killed(node):
    mark = f"{TAG}-kill{node}"
    with Hosts(2) as h:
        procs = [h.agent(k, 2, workers(mark)) for k in (0, 1)]
        wait_for_processes(mark, 8)
        t0 = time.time()
        procs[node].kill()
        end = stopped_at(mark)
        res = finish(procs)
        measure(f"kill -9 of node {node}'s agent", end - t0)
        other = res[1 - node]
        check(other[0] == 1, f"the surviving agent exits 1, rc {other[0]}", other[2])
        line = first_failure(other[2])
        if node == 0:
            check(line and "node rank 0: the rendezvous store on node 0 stopped answering" in line, "store loss named",
                  other[2])
        else:
            check(line and "node rank 1: its distrun agent closed its connection to node 0" in line,
                  "the dead agent named by its closed connection, not after the heartbeat timeout", other[2])
    stopped_at(mark, within=3)


def case_agent_killed_node0():
    agent_killed(0)


def case_agent_killed_node1():
    agent_killed(1)


def case_agent_frozen_node0():
    """SIGSTOP of node 0's agent (its workers keep running): node 1 loses the store, stops its
    workers and exits 1 naming node 0; after SIGCONT node 0's agent stops its own workers and
    exits 1 too (the others gave up on it), so nothing is left running."""
    mark = f"{TAG}-frz"
    marks = [f"{mark}n{k}" for k in (0, 1)]
    with Hosts(2) as h:
        procs = [h.agent(k, 2, workers(marks[k]), extra=["--rdzv-conf", "heartbeat_timeout=3"]) for k in (0, 1)]
        for m in marks:
            wait_for_processes(m, 5)  # the agent, 2 workers, 2 workers' children
        t0 = time.time()
        procs[0].send_signal(signal.SIGSTOP)
        try:
            rc1 = procs[1].wait(timeout=30)
            detected = time.time()
            node1_clear = stopped_at(marks[1])
            pythons = [p for p in processes_with(marks[0]) if p[1].startswith(PYTHON)]
            check(len(pythons) == 4, "node 0's workers run on while its agent is frozen", str(pythons))
        finally:
            t1 = time.time()
            procs[0].send_signal(signal.SIGCONT)
        node0_clear = stopped_at(marks[0], agents=procs)
        res = finish(procs)
        print(f"MEASURE SIGSTOP of node 0's agent: node 1's agent ended {detected - t0:.2f} s later, its workers "
              f"gone {node1_clear - t0:.2f} s later", flush=True)
        print(f"MEASURE SIGCONT of node 0's agent: its workers gone {node0_clear - t1:.2f} s later", flush=True)
        check(rc1 == 1 and res[1][0] == 1, f"node 1 exits 1: rc {res[1][0]}", res[1][2])
        line = first_failure(res[1][2]) or ""
        check("node rank 0: the rendezvous store on node 0 stopped answering for the heartbeat timeout" in line,
              "node 1 names node 0", res[1][2])
        check(res[0][0] == 1, f"node 0 exits 1 once resumed: rc {res[0][0]}", res[0][2])
        check("node rank 0: node 0's own agent had not run for" in (first_failure(res[0][2]) or ""),
              "node 0 names its own stall first, not node 1 that gave up on it", res[0][2])
    stopped_at(mark, within=3)


def case_stalled_node0_late_arrival():
    """Three nodes: node 1 joins, node 0's agent is then stopped (SIGSTOP) during the
    rendezvous, and node 2 arrives meanwhile (its connection is accepted by node 0's kernel,
    but nobody answers). Nodes 1 and 2 both end after the heartbeat timeout (3 s here) naming
    node 0, not at the 20 s rendezvous timeout; node 0, resumed, ends too."""
    mark = f"{TAG}-late"
    extra = ["--rdzv-conf", "heartbeat_timeout=3"]
    with Hosts(3) as h:
        procs = [h.agent(k, 3, ["--", "true", mark], extra=extra) for k in (0, 1)]
        # Node 1 connected to node 0 (slowly under sanitizers), then a moment to join.
        deadline = time.time() + 15
        while f"{ADDR[0]}:{PORT}" not in subprocess.run(["ip", "netns", "exec", h.ns[1], "ss", "-tnH", "state",
                                                         "established"], capture_output=True, text=True).stdout:
            check(time.time() < deadline and procs[1].poll() is None, "node 1 connects to node 0")
            time.sleep(0.1)
        time.sleep(1)
        t0 = time.time()
        procs[0].send_signal(signal.SIGSTOP)
        try:
            procs.append(h.agent(2, 3, ["--", "true", mark], extra=extra))
            late = finish(procs[1:], timeout=18)
            took = time.time() - t0
        finally:
            procs[0].send_signal(signal.SIGCONT)
        first = finish(procs[:1], timeout=15)
        resumed = time.time() - t0 - took
        print(f"MEASURE node 0 stopped during a 3-node rendezvous: {took:.2f} s until nodes 1 and 2 ended "
              f"(heartbeat timeout 3 s); node 0 ended {resumed:.2f} s after its SIGCONT", flush=True)
        for k, (rc, _, err) in zip((1, 2), late):
            check(rc == 1, f"node {k} exits 1: rc {rc}", err)
            check("node 0" in err and "heartbeat timeout" in err and "did not answer within 20 s" not in err,
                  f"node {k} names node 0's silence", err)
        check(took < 12, f"after the heartbeat timeout, not the 20 s rendezvous timeout: {took:.2f} s")
        check(first[0][0] == 1, f"node 0 exits 1 once resumed: rc {first[0][0]}", first[0][2])
        check("node rank 0: node 0's own agent had not run for" in (first_failure(first[0][2]) or ""),
              "node 0 names its own stall, not the nodes that gave up on it", first[0][2])


def case_cpu_bind_auto_per_host():
    """--cpu-bind auto (the default) binds the ranks of an agent alone on its host: two nodes
    with one host name (agents sharing a machine) leave their ranks unbound, each seeing every
    CPU; under host names of their own, each node's two ranks get disjoint shares."""
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        skip(f"needs 2 CPUs to tell shares apart, has {allowed}")
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        skip("`unshare --uts` is not available here")
    show = ["--", PYTHON, "-c", "import os; print('CPUS', sorted(os.sched_getaffinity(0)))"]
    with Hosts(2) as h:
        for names in ([None, None], ["dmh-a", "dmh-b"]):
            res = finish([h.agent(k, 2, show, hostname=names[k]) for k in (0, 1)])
            check([r[0] for r in res] == [0, 0], f"both nodes finish: rc {[r[0] for r in res]}", str(res))
            for k, (_, out, _) in enumerate(res):
                # Found anywhere: under load a rank's line may be cut by another's (unended
                # output is held only 200 ms for its newline).
                sets = [json.loads(m) for m in re.findall(r"CPUS (\[[0-9, ]*\])", out)]
                check(len(sets) == 2, f"node {k}: both ranks report", out)
                if names[0] is None:
                    check(sets == [allowed, allowed], f"one host name: node {k}'s ranks unbound", out)
                else:
                    check(all(s and set(s) < set(allowed) for s in sets) and not set(sets[0]) & set(sets[1]),
                          f"a host of its own: node {k}'s ranks on disjoint shares of {allowed}", out)


def case_host_vanishes():
    """Node 1's link goes down mid-job: node 0 names the silent agent (no heartbeat), node 1
    loses the store; both stop their workers and exit 1."""
    mark = f"{TAG}-gone"
    with Hosts(2) as h:
        procs = [h.agent(k, 2, workers(mark), extra=["--rdzv-conf", "heartbeat_timeout=3"]) for k in (0, 1)]
        wait_for_processes(mark, 8)
        t0 = time.time()
        ip("-n", h.hub, "link", "set", "p1", "down")
        end = stopped_at(mark)
        res = finish(procs)
        measure("node 1's network cut", end - t0)
        check([r[0] for r in res] == [1, 1], f"rc {[r[0] for r in res]}", str(res))
        check("node rank 1: its distrun agent stopped answering" in (first_failure(res[0][2]) or ""),
              "node 0 names node 1", res[0][2])
        check("node rank 0: the rendezvous store on node 0 stopped answering for the heartbeat timeout" in
              (first_failure(res[1][2]) or ""), "node 1 names the lost store", res[1][2])
    stopped_at(mark, within=3)


def case_blips_survived():
    """Node 1's link goes down for 2 s, then for 10 s (under a 15 s heartbeat timeout): the job
    goes on and every node exits 0; the agents' connections to node 0 outlive the blips."""
    mark = f"{TAG}-blip"
    program = ["--", PYTHON, "-c", "import sys, time; time.sleep(float(sys.argv[1]))", "17", mark]
    with Hosts(2) as h:
        procs = [h.agent(k, 2, program, extra=["--rdzv-conf", "heartbeat_timeout=15"]) for k in (0, 1)]
        wait_for_processes(mark, 6)  # 2 agents, 4 workers
        t0 = time.time()
        for down in (2, 10):
            ip("-n", h.hub, "link", "set", "p1", "down")
            time.sleep(down)
            ip("-n", h.hub, "link", "set", "p1", "up")
            time.sleep(1)
            check(all(p.poll() is None for p in procs), f"both agents still run after a {down} s blip")
        res = finish(procs)
        print(f"MEASURE blips of 2 s and 10 s: job done {time.time() - t0:.1f} s after the first", flush=True)
        check([r[0] for r in res] == [0, 0], f"both nodes finish: rc {[r[0] for r in res]}", str(res))
    stopped_at(mark, within=3)


def case_signal_during_rendezvous():
    """Three nodes, one never comes: SIGTERM to node 1 while it waits ends it at once (143),
    and node 0, told, ends too (1) instead of waiting for the rendezvous timeout."""
    with Hosts(3) as h:
        procs = [h.agent(k, 3, ["--", "true"]) for k in (0, 1)]
        time.sleep(1.5)  # both are now waiting for node 2
        t0 = time.time()
        procs[1].send_signal(signal.SIGTERM)
        res = finish(procs, timeout=15)
        took = time.time() - t0
        print(f"MEASURE SIGTERM during the rendezvous: {took:.2f} s until both agents ended", flush=True)
        check([r[0] for r in res] == [1, 1], f"rc {[r[0] for r in res]}", str(res))
        check("distrun stopped by SIGTERM while the nodes met" in res[0][2], "node 0 names node 1's signal", res[0][2])
        check(took < 15, "well before the 20 s rendezvous timeout")


def case_no_secret():
    """Several nodes and no secret, or a weak one: exit 2 at once, saying what to set and how; a
    secret file must be a private (0600) regular file."""
    env = dict(os.environ)
    env.pop("DISTRUN_STORE_SECRET", None)
    base = [DISTRUN, "--nnodes", "2", "--node-rank", "1", "--master-port", PORT, "--rdzv-timeout", "30", "--", "true"]
    t0 = time.time()
    r = subprocess.run(base, capture_output=True, text=True, timeout=20, env=env)
    check(r.returncode == 2, f"rc {r.returncode}", r.stderr)
    check("DISTRUN_STORE_SECRET" in r.stderr and "head -c 32 /dev/urandom" in r.stderr, "how to set one", r.stderr)
    check(time.time() - t0 < 10, "at once, not after the rendezvous timeout")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "secret")
        with open(path, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(path, 0o644)
        r = subprocess.run([*base[:1], "--rdzv-secret-file", path, *base[1:]], capture_output=True, text=True,
                           timeout=20, env=env)
        check(r.returncode == 2 and "chmod 600" in r.stderr, f"0644 refused: rc {r.returncode}", r.stderr)
        # A FIFO is refused before it is opened (opening it would wait for a writer).
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo, 0o600)
        r = subprocess.run([*base[:1], "--rdzv-secret-file", fifo, *base[1:]], capture_output=True, text=True,
                           timeout=20, env=env)
        check(r.returncode == 2 and "not a regular file" in r.stderr, f"FIFO refused: rc {r.returncode}", r.stderr)
    # A weak secret: exit 2, saying how to make a strong one.
    for weak in ["x", "s3cret", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]:
        r = subprocess.run(base, capture_output=True, text=True, timeout=20, env=dict(env, DISTRUN_STORE_SECRET=weak))
        check(r.returncode == 2 and "too weak" in r.stderr and "openssl rand -hex 16" in r.stderr,
              f"weak secret {weak!r} refused: rc {r.returncode}", r.stderr)


def case_master_port_taken():
    """--master-port taken on node 0's host (another program listens on node 0's address and
    port): node 0 of a 2-node job exits 2 at once, naming the port, as on one node."""
    mark = f"{TAG}-taken"
    hold = f"import socket, time; s = socket.create_server(('{ADDR[0]}', {PORT})); print('ready', flush=True); time.sleep(60)"
    with Hosts(2) as h:
        holder = subprocess.Popen(["ip", "netns", "exec", h.ns[0], PYTHON, "-c", hold], stdout=subprocess.PIPE, text=True)
        try:
            check(holder.stdout.readline().strip() == "ready", "another program holds the port")
            t0 = time.time()
            res = finish([h.agent(0, 2, ["--", "true", mark])], timeout=20)
            took = time.time() - t0
        finally:
            holder.kill()
            holder.wait()
        check(res[0][0] == 2 and "already in use" in res[0][2] and PORT in res[0][2],
              f"node 0 exits 2 naming the port: rc {res[0][0]}", res[0][2])
        print(f"MEASURE a taken --master-port on node 0: it ended {took:.2f} s after its start", flush=True)
        check(took < 10, f"at once, not after the rendezvous timeout: {took:.2f} s")


def case_ipv6_master_addr():
    """--master-addr [v6addr] (a URL's brackets) on namespace hosts given IPv6 addresses: the
    agents meet over IPv6, and the workers' store, on node 0's v6 address, serves a scenario
    across both hosts."""
    need_worker()
    v6 = ["fd00:d1::1", "fd00:d1::2"]
    with Hosts(2) as h:
        for k in (0, 1):
            ip("-n", h.ns[k], "addr", "add", f"{v6[k]}/64", "dev", "eth0", "nodad")
        res = finish([h.agent(k, 2, [os.path.join(DATA, "all_reduce_4.yaml")], master=f"[{v6[0]}]") for k in (0, 1)])
        check([r[0] for r in res] == [0, 0], f"both nodes finish: rc {[r[0] for r in res]}", str(res))
        check(res[0][1].count("[ 6. 10. 14. 18.]") == 4, "every rank's all_reduce, checked", res[0][1])


def case_secret_file_and_wrong_secret():
    """Two nodes with one secret file (0600) meet; an agent with another secret is refused,
    node 0 learns it from that refusal and both end within 5 s (not at the 20 s rendezvous
    timeout), and node 0 listens on its own address only."""
    mark = f"{TAG}-sec"
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "secret")
        with open(path, "w") as f:
            f.write(SECRET)
        os.chmod(path, 0o600)
        procs = [h.agent(k, 2, ["--", "true"], secret=None, extra=["--rdzv-secret-file", path]) for k in (0, 1)]
        res = finish(procs)
        check([r[0] for r in res] == [0, 0], f"same secret file: rc {[r[0] for r in res]}", str(res))

        p0 = h.agent(0, 2, ["--", PYTHON, "-c", "print('ran')", mark], rdzv_timeout=20)
        deadline = time.time() + 15  # node 0 starts listening (slowly under sanitizers)
        while True:
            ss = subprocess.run(["ip", "netns", "exec", h.ns[0], "ss", "-ltnH"], capture_output=True, text=True,
                                timeout=10)
            if f":{PORT} " in ss.stdout or time.time() > deadline or p0.poll() is not None:
                break
            time.sleep(0.1)
        check(f"{ADDR[0]}:{PORT}" in ss.stdout and f"0.0.0.0:{PORT}" not in ss.stdout and f"*:{PORT}" not in ss.stdout,
              "the rendezvous listens on the master's address only", ss.stdout)
        t1 = time.time()
        p1 = h.agent(1, 2, ["--", PYTHON, "-c", "print('ran')", mark], secret="not-" + SECRET,
                     rdzv_timeout=20)
        res = finish([p0, p1])
        took = time.time() - t1
        print(f"MEASURE a node with the wrong secret: {took:.2f} s until both agents ended", flush=True)
        check(res[1][0] != 0 and "secret" in res[1][2], f"wrong secret refused: rc {res[1][0]}", res[1][2])
        check(res[0][0] == 2 and "proved another job secret and was refused, and node(s) 1 of 2 have not joined"
              in res[0][2], f"node 0 names the refused secret: rc {res[0][0]}", res[0][2])
        check(took < 5, "within 5 s, not at the 20 s rendezvous timeout")
        check("ran" not in res[0][1] + res[1][1], "no worker ran")
    stopped_at(mark, within=3)


# Captures every frame through one interface of the hub (a raw AF_PACKET socket, as root)
# into a file, until SIGTERM.
SNIFF_PY = r"""
import signal, socket, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((sys.argv[2], 0))
s.settimeout(0.1)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
with open(sys.argv[1], "wb") as out:
    print("ready", flush=True)
    while not stop:
        try:
            out.write(s.recv(1 << 18))
        except (socket.timeout, InterruptedError):
            pass
"""


def case_wire_holds_no_secret():
    """A 2-node job (a scenario's workers and their store across the link) captured on node 0's
    veth: neither the job secret nor the workers' secret is on the wire, in text or in bytes,
    while the rendezvous' and the workers' store keys are (the capture saw them); the ranks'
    socket pairs open with proofs, and no key to connect with travels in the store."""
    need_worker()
    scen = os.path.join(DATA, "all_reduce_4.yaml")
    wrapper = 'echo "WORKERS_SECRET $DISTRUN_STORE_SECRET"; exec "$0" "$@"'
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        cap = os.path.join(d, "capture")
        sniffer = subprocess.Popen(["ip", "netns", "exec", h.hub, PYTHON, "-c", SNIFF_PY, cap, "p0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            if sniffer.stdout.readline().strip() != "ready":
                raise Failed("the sniffer does not run\n" + sniffer.stderr.read())
            procs = [h.agent(k, 2, ["--", "sh", "-c", wrapper, WORKER, scen]) for k in (0, 1)]
            res = finish(procs)
        finally:
            sniffer.send_signal(signal.SIGTERM)
            sniffer.communicate(timeout=10)
        check([r[0] for r in res] == [0, 0], f"the job runs: rc {[r[0] for r in res]}", str(res))
        mine = {l.split()[1] for r in res for l in r[1].splitlines() if "WORKERS_SECRET " in l}
        check(len(mine) == 1, f"every worker has the same secret: {mine}", str(res))
        workers_secret = mine.pop()
        with open(cap, "rb") as f:
            wire = f.read()
        print(f"captured {len(wire)} bytes on node 0's link", flush=True)
        check(b"distrun/rdzv/" in wire, "the capture holds the rendezvous' traffic")
        check(b"members/" in wire, "the capture holds the workers' store traffic")
        # The plan (where the workers' secret used to travel) is there, with a salt in its place.
        check(re.search(rb"ok\n\d+\n[0-9a-f]{32}\n2 ", wire), "the capture holds node 0's plan")
        for name, value in [("job secret", SECRET), ("workers' secret", workers_secret)]:
            check(value.encode() not in wire, f"the {name} is not on the wire as text")
            check(bytes.fromhex(value) not in wire, f"the {name} is not on the wire as bytes")
        check(workers_secret != SECRET and len(workers_secret) == 64, "the workers' secret is derived, not the job's")
        # The ranks' own connections across the link open with hellos that prove a key derived
        # from the workers' secret; the store holds each group's id, and no key of any kind.
        check(b"dtsockv2" in wire, "the capture holds the socket path's hellos")
        check(b"sock/group" in wire and b"sock/key" not in wire and b"sock/token" not in wire,
              "the store carries the groups' ids, not a key a sniffer could connect with")


# Sends a hello (hex, argv[3]) to argv[1]:argv[2] as a stranger would and prints how the peer
# answered: "closed" (the end, no byte), "answered" or "silent" (nothing within 10 s).
REPLAY_PY = r"""
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
s.sendall(bytes.fromhex(sys.argv[3]))
try:
    print("closed" if s.recv(64) == b"" else "answered", flush=True)
except socket.timeout:
    print("silent", flush=True)
except ConnectionResetError:
    print("closed", flush=True)
"""


def sniffed_hello(wire):
    """The first socket-path hello in a capture of raw Ethernet frames, with the address it went
    to: (hello, "a.b.c.d", port), or None."""
    at = wire.find(b"dtsockv2")
    while at >= 0:
        for tcp_len in range(20, 64, 4):
            ip = at - tcp_len - 20
            if ip >= 0 and wire[ip] == 0x45 and wire[ip + 9] == 6 and wire[ip + 32] >> 4 == tcp_len // 4 \
                    and len(wire) >= at + 96:
                dst = ".".join(str(b) for b in wire[ip + 16:ip + 20])
                return wire[at:at + 96], dst, int.from_bytes(wire[ip + 22:ip + 24], "big")
        at = wire.find(b"dtsockv2", at + 1)
    return None


def case_sniffed_pair_handshake_refused():
    """Two ranks on two hosts over the socket path, the link captured: the hello rank 0 sent to
    rank 1 is sent again to rank 1 from the network while the job runs; rank 1 closes it without
    a byte, and the job goes on."""
    need_worker()
    slow = os.path.join(DATA, "slow_all_reduce_2.yaml")
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        cap = os.path.join(d, "capture")
        sniffer = subprocess.Popen(["ip", "netns", "exec", h.hub, PYTHON, "-c", SNIFF_PY, cap, "p0"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs = []
        try:
            if sniffer.stdout.readline().strip() != "ready":
                raise Failed("the sniffer does not run\n" + sniffer.stderr.read())
            procs = [direct_worker(h, k, k, 2, 1, slow, SECRET) for k in (0, 1)]
            deadline, found = time.time() + 30, None
            while found is None and time.time() < deadline and all(p.poll() is None for p in procs):
                time.sleep(0.2)
                with open(cap, "rb") as f:
                    found = sniffed_hello(f.read())
            check(found is not None, "the capture holds rank 0's hello to rank 1")
            hello, dst, port = found
            check(dst == ADDR[1], f"the hello went to rank 1's host: {dst}")
            replay = subprocess.run(["ip", "netns", "exec", h.ns[0], PYTHON, "-c", REPLAY_PY, dst, str(port),
                                     hello.hex()], capture_output=True, text=True, timeout=30)
            check(replay.stdout.strip() == "closed", f"the replayed hello is refused: {replay.stdout.strip()}",
                  replay.stderr)
            check(all(p.poll() is None for p in procs), "the job goes on",
                  "\n".join(p.communicate()[1] for p in procs if p.poll() is not None))
        finally:
            for p in procs:
                p.kill()
            if procs:
                finish(procs)
            sniffer.send_signal(signal.SIGTERM)
            sniffer.communicate(timeout=10)


# A worker that ends (exit 0) once the file argv[1] exists, or after 60 s.
UNTIL_PY = r"""
import os, sys, time
end = time.time() + 60
while not os.path.exists(sys.argv[1]) and time.time() < end:
    time.sleep(0.05)
"""


def relayed_job(h, mark, attack, release=None):
    """A 2-node job whose node 1 reaches node 0 only through the frame relay on host 2 (its
    --master-addr); once the workers run, the relay is told `attack`, and once it answered, the
    workers are told to end (the file `release` made). Returns the relay's answer and the
    agents' (rc, out, err)."""
    relay = subprocess.Popen(["ip", "netns", "exec", h.ns[2], FRAME_RELAY, f"{ADDR[2]}:{PORT}", f"{ADDR[0]}:{PORT}"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if relay.stdout.readline().strip() != "ready":
            raise Failed("the relay does not run\n" + relay.stderr.read())
        program = ["--", PYTHON, "-c", UNTIL_PY, release or os.devnull + "/none", mark]
        procs = [h.agent(k, 2, program, master=ADDR[2] if k else ADDR[0], extra=["--rdzv-conf", "heartbeat_timeout=8"])
                 for k in (0, 1)]
        try:
            wait_for_processes(mark, 6)  # 2 agents, 4 workers
        except Failed:
            for p in procs:
                p.kill()
            raise Failed(f"the job did not start through the relay\n{finish(procs)}")
        relay.stdin.write(attack + "\n")
        relay.stdin.flush()
        answer = ""
        for line in iter(relay.stdout.readline, ""):  # bounded: the relay answers within 15 s
            if line == "done\n":
                break
            answer += line
        if release:
            open(release, "w").close()
        return answer, finish(procs)
    finally:
        relay.kill()
        relay.wait()


def case_frames_replayed_and_altered():
    """A relay on a third host sits between the two nodes of a real job (node 1's
    --master-addr is the relay's) and records every rendezvous-store frame node 1's agent sends.
    Each session it recorded (node 1's requests, its heartbeats and its listener parked on the
    failure key), replayed on a fresh connection, is refused at the proof, before any request,
    and the job runs on: both nodes exit 0. A frame of node 1's live session sent twice is
    answered at most once (a heartbeat has no reply) and the session closed; one altered is not answered and the session closed: node 0 names
    node 1's closed connection at once, and both nodes stop, exit 1."""
    if not os.access(FRAME_RELAY, os.X_OK):
        raise Failed(f"FRAME_RELAY={FRAME_RELAY!r} is not an executable")
    with Hosts(3) as h, tempfile.TemporaryDirectory() as d:
        answer, res = relayed_job(h, f"{TAG}-replay", "replay", os.path.join(d, "release"))
        replays = re.findall(r"replay (\d+): sent (\d+), replies (\d+), last refused (\d), closed (\d)", answer)
        check(any(int(sent) >= 3 for _, sent, _, _, _ in replays),
              "the relay recorded a session of node 1 past its handshake (requests included)", answer)
        # A session recorded in its handshake (a listener just starting) gets a challenge only.
        check(all(r[4] == "1" and (r[2:4] == ("2", "1") if int(r[1]) >= 2 else r[2] == "1") for r in replays),
              "each replayed session is refused at its proof (a challenge, a refusal, closed)", answer)
        check([r[0] for r in res] == [0, 0], f"the job runs on: rc {[r[0] for r in res]}", str(res))
        # The frame repeated is the agent's next: a request (answered once) or a heartbeat (never).
        for attack, replies in [("repeat", "[01]"), ("alter", "0")]:
            mark = f"{TAG}-{attack}"
            answer, res = relayed_job(h, mark, f"{attack} 0")
            end = stopped_at(mark)
            got = re.search(rf"{attack} 0: replies after {replies}, closed 1, at ([0-9.]+)", answer)
            check(got, f"{attack}: answered {replies} time(s), then the session closed", answer)
            print(f"MEASURE a frame of node 1's session {attack}ed on the wire: {end - float(got[1]):.2f} s until no "
                  "worker was left on either node", flush=True)
            check([r[0] for r in res] == [1, 1], f"{attack}: both nodes stop: rc {[r[0] for r in res]}", str(res))
            check("node rank 1: its distrun agent closed its connection to node 0" in (first_failure(res[0][2]) or ""),
                  f"{attack}: node 0 names node 1's closed session", res[0][2])


def direct_worker(h, k, rank, world, local_world, scen, secret=None):
    """distrun-worker started directly (as srun or mpirun would) on host `k`."""
    env = dict(os.environ, DISTRUN_CMA="0", RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % local_world),
               LOCAL_WORLD_SIZE=str(local_world), MASTER_ADDR=ADDR[0], MASTER_PORT="29600")
    env.pop("DISTRUN_STORE_SECRET", None)
    if secret:
        env["DISTRUN_STORE_SECRET"] = secret
    return subprocess.Popen(["ip", "netns", "exec", h.ns[k], WORKER, "--timeout", "20", scen],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def case_direct_workers():
    """distrun-worker started directly: ranks on two hosts without a secret exit 2 at once
    naming DISTRUN_STORE_SECRET (and run with one); ranks on one host serve rank 0's store on
    loopback only, even with MASTER_ADDR a routable address of that host."""
    need_worker()
    slow, four = os.path.join(DATA, "slow_all_reduce_2.yaml"), os.path.join(DATA, "all_reduce_4.yaml")
    with Hosts(2) as h:
        t0 = time.time()
        res = finish([direct_worker(h, k, k, 2, 1, slow) for k in (0, 1)], timeout=20)
        check([r[0] for r in res] == [2, 2], f"no secret across hosts: rc {[r[0] for r in res]}", str(res))
        check(all("DISTRUN_STORE_SECRET" in r[2] and "openssl rand" in r[2] for r in res), "names the variable", str(res))
        check(time.time() - t0 < 10, "at once")
        res = finish([direct_worker(h, r // 2, r, 4, 2, four, SECRET) for r in range(4)], timeout=40)
        check([r[0] for r in res] == [0] * 4, f"with a secret they run: rc {[r[0] for r in res]}", str(res))
        procs = [direct_worker(h, 0, r, 2, 2, slow) for r in (0, 1)]
        try:
            deadline = time.time() + 15
            while True:
                ss = subprocess.run(["ip", "netns", "exec", h.ns[0], "ss", "-ltnH"], capture_output=True, text=True,
                                    timeout=10).stdout
                if ":29600 " in ss or time.time() > deadline or any(p.poll() is not None for p in procs):
                    break
                time.sleep(0.1)
            check("127.0.0.1:29600 " in ss and f"{ADDR[0]}:29600" not in ss, "one host: the store on loopback only", ss)
        finally:
            for p in procs:
                p.kill()
            finish(procs)


def case_mismatched_nnodes():
    """--nnodes 2 on node 0 and 3 on node 1: both nodes say exactly that, at once."""
    with Hosts(2) as h:
        t0 = time.time()
        procs = [h.agent(0, 2, ["--", "true"]), h.agent(1, 3, ["--", "true"])]
        res = finish(procs, timeout=20)
        took = time.time() - t0
        print(f"MEASURE mismatched --nnodes: {took:.2f} s until both agents ended", flush=True)
        check(res[1][0] == 2 and res[0][0] != 0, f"rc {[r[0] for r in res]}", str(res))
        want = "--nnodes 3 on node 1 but 2 on node 0: give the same --nnodes on every node"
        check(all(want in r[2] for r in res), "every node names the mismatch", str(res))
        check(took < 10, "at once, not after the rendezvous timeout")


def case_node_cannot_join():
    """Node 1's input is refused before it joins (its --results folder is missing): it exits 2
    and tells node 0, which ends at once naming it, not at the rendezvous timeout."""
    need_worker()
    scen = os.path.join(DATA, "all_reduce_4.yaml")
    with Hosts(2) as h:
        t0 = time.time()
        procs = [h.agent(0, 2, [scen]), h.agent(1, 2, ["--results", "/nonexistent/folder/r.jsonl", scen])]
        res = finish(procs, timeout=20)
        took = time.time() - t0
        print(f"MEASURE a node that cannot join: {took:.2f} s until both agents ended", flush=True)
        check([r[0] for r in res] == [1, 2], f"rc {[r[0] for r in res]}", str(res))
        line = first_failure(res[0][2]) or ""
        check("node rank 1: cannot join the job:" in line and "/nonexistent/folder" in line, "node 0 names node 1",
              res[0][2])
        check(took < 5, "within 5 s, not at the 20 s rendezvous timeout")


def case_restart_keeps_port():
    """An explicit workers' port stays across restarts (two nodes, --workers-port; one node,
    --master-port); distrun-worker serves on the agent's bound socket."""
    script = ('echo "PORT $TORCHELASTIC_RESTART_COUNT $MASTER_PORT"; '
              'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 3 ]; then exit 4; fi')
    with Hosts(2) as h:
        procs = [h.agent(k, 2, ["--", "sh", "-c", script], extra=["--workers-port", "29555", "--max-restarts", "1"])
                 for k in (0, 1)]
        res = finish(procs)
        check([r[0] for r in res] == [0, 0], f"recovers: rc {[r[0] for r in res]}", str(res))
        ports = sorted(l for r in res for l in r[1].splitlines() if "PORT " in l)
        check(len(ports) == 8 and all(l.endswith(" 29555") for l in ports), f"one port in both attempts: {ports}")
        if os.access(WORKER, os.X_OK):
            procs = [h.agent(k, 2, [os.path.join(DATA, "all_reduce_4.yaml")], extra=["--workers-port", "29556"])
                     for k in (0, 1)]
            res = finish(procs)
            check([r[0] for r in res] == [0, 0], f"scenario on the handed socket: rc {[r[0] for r in res]}", str(res))
        r = subprocess.run(["ip", "netns", "exec", h.ns[0], DISTRUN, "--nproc-per-node", "2", "--master-port", "29557",
                            "--max-restarts", "1", "--", "sh", "-c", script.replace('"$RANK" = 3', '"$RANK" = 1')],
                           capture_output=True, text=True, timeout=40)
        ports = sorted(l for l in r.stdout.splitlines() if "PORT " in l)
        check(r.returncode == 0 and len(ports) == 4 and all(l.endswith(" 29557") for l in ports),
              f"one node: rc {r.returncode}, {ports}", r.stderr)


def case_results_from_all_nodes():
    """--results on every node: node 0's file holds every rank's records; on some nodes only:
    refused at the rendezvous (exit 2 everywhere), naming the nodes."""
    need_worker()
    scen = os.path.join(DATA, "all_reduce_4.yaml")
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        files = [os.path.join(d, f"r{k}.jsonl") for k in (0, 1)]
        procs = [h.agent(k, 2, ["--results", files[k], scen]) for k in (0, 1)]
        res = finish(procs)
        check([r[0] for r in res] == [0, 0], f"rc {[r[0] for r in res]}", str(res))
        with open(files[0]) as f:
            ranks = sorted(json.loads(l)["rank"] for l in f if l.strip())
        check(ranks == [0, 1, 2, 3], f"every rank's record in node 0's file: {ranks}")
        procs = [h.agent(0, 2, ["--results", files[0], scen]), h.agent(1, 2, [scen])]
        res = finish(procs)
        check([r[0] for r in res] == [2, 2], f"mismatch refused: rc {[r[0] for r in res]}", str(res))
        check(all("--results was given on node(s) 0 but not on node(s) 1" in r[2] for r in res), "names the nodes",
              str(res))


# An elastic worker: prints its place (WORLD_SIZE RANK GROUP_RANK GROUP_WORLD_SIZE restart
# count), then ends at once in the world the case waits for and sleeps in any other (until
# its agent stops it).
ELASTIC_PY = r"""
import os, sys, time
e = os.environ
line = " ".join(["ELASTIC", e["WORLD_SIZE"], e["RANK"], e["GROUP_RANK"], e["GROUP_WORLD_SIZE"],
                 e["TORCHELASTIC_RESTART_COUNT"]])
print(line, flush=True)
with open(e["ELASTIC_LOG"], "a") as f:  # also where the case can wait for it
    f.write(line + "\n")
done = e["TORCHELASTIC_RESTART_COUNT"] != "0" if sys.argv[2] == "dies" else e["WORLD_SIZE"] == sys.argv[3]
if not done:
    time.sleep(60)
"""


def elastic_agent(h, k, mark, mode, log, want_world="4", extra=(), nnodes="1:2"):
    """distrun as torchrun's elastic c10d user types it: --nnodes 1:2, the endpoint, no node rank."""
    full = dict(os.environ, DISTRUN_CMA="0", DISTRUN_STORE_SECRET=SECRET, ELASTIC_LOG=log)
    cmd = ["ip", "netns", "exec", h.ns[k], DISTRUN, "--nnodes", nnodes, "--nproc-per-node", "2", "--rdzv-backend", "c10d",
           "--rdzv-endpoint", f"{ADDR[0]}:{PORT}", "--rdzv-conf", "last_call_timeout=1,join_timeout=20",
           "--monitor-interval", "0.2", "--stop-grace", "1", *extra, "--", PYTHON, "-c", ELASTIC_PY, mark, mode,
           want_world]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


def wait_for_lines(path, want, within=30):
    """Until the workers wrote every line of `want` (see elastic_lines) to `path`."""
    deadline = time.time() + within
    while not os.path.exists(path) or not want <= elastic_lines(open(path).read()):
        if time.time() > deadline:
            raise Failed(f"the workers never wrote {sorted(want)} to {path} within {within} s")
        time.sleep(0.05)


def elastic_lines(out):
    """{(world, rank, group_rank, group_world, restart)} the workers printed."""
    return {tuple(int(x) for x in m) for m in re.findall(r"ELASTIC (\d+) (\d+) (\d+) (\d+) (\d+)", out)}


def case_elastic_node_dies():
    """--nnodes 1:2 on two hosts; kill -9 of node 1's agent mid-run: node 0 stops its workers,
    meets alone in a new round (last call), and restarts them with WORLD_SIZE halved and the
    restart counted; it finishes, exit 0, and nothing is left on either host. With --nnodes 2:3
    a node that leaves leaves fewer than MIN: node 0 fails (exit 1) instead."""
    mark = f"{TAG}-edie"
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log")
        p0 = elastic_agent(h, 0, mark, "dies", log, extra=["--max-restarts", "1"])
        p1 = elastic_agent(h, 1, mark, "dies", log, extra=["--max-restarts", "1"])
        round0 = {(4, 0, 0, 2, 0), (4, 1, 0, 2, 0), (4, 2, 1, 2, 0), (4, 3, 1, 2, 0)}
        wait_for_lines(log, round0)
        p1.kill()
        res = finish([p0, p1])
        stopped_at(mark)
        check(res[0][0] == 0, f"node 0 finishes alone: rc {res[0][0]}", res[0][2])
        got = elastic_lines(res[0][1])
        # Under load node 1 may come after node 0's last call: node 0 then ran alone first
        # (world 2, restart count 0) until node 1 joined, a restart that is not counted.
        late = {(2, 0, 0, 1, 0), (2, 1, 0, 1, 0)}
        after = {(2, 0, 0, 1, 1), (2, 1, 0, 1, 1)}
        check(round0 | after <= elastic_lines(open(log).read()) | got and got - late == {(4, 0, 0, 2, 0), (4, 1, 0, 2, 0)} | after,
              f"node 0: world 4 with node 1, then 2 with TORCHELASTIC_RESTART_COUNT 1: {sorted(got)}", res[0][1])
        check("node rank 1: its distrun agent closed its connection" in res[0][2] and "restart 1 of 1" in res[0][2],
              "node 0 names the lost node and counts the restart", res[0][2])
        # With --nnodes 2:3 a node that leaves (SIGTERM here, at once) leaves fewer than MIN:
        # the job ends on both nodes, restarts or not.
        p0 = elastic_agent(h, 0, mark, "dies", log + "2", extra=["--max-restarts", "1"], nnodes="2:3")
        p1 = elastic_agent(h, 1, mark, "dies", log + "2", extra=["--max-restarts", "1"], nnodes="2:3")
        wait_for_lines(log + "2", round0)
        p1.send_signal(signal.SIGTERM)
        res = finish([p0, p1])
        stopped_at(mark)
        check([r[0] for r in res] == [1, 1] and
              "node rank 1: distrun stopped by SIGTERM" in (first_failure(res[0][2]) or ""),
              f"2:3 with one node left fails: rc {[r[0] for r in res]}", str(res))
        check(all(l[4] == 0 for l in elastic_lines(res[0][1])), "and is not restarted", res[0][1])


def case_elastic_node_joins():
    """--nnodes 1:2: one node alone runs its job to the end after the last call (world 2);
    then one node starts alone and a second joins later: the running group restarts with it
    (not counted), ranks dense by arrival, and both finish with world 4."""
    mark = f"{TAG}-ejoin"
    with Hosts(2) as h, tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log")
        alone = finish([elastic_agent(h, 0, mark, "joins", log + "0", want_world="2")])[0]
        check(alone[0] == 0 and elastic_lines(alone[1]) == {(2, 0, 0, 1, 0), (2, 1, 0, 1, 0)},
              f"one node of 1:2 runs alone: rc {alone[0]}", alone[1] + alone[2])
        p0 = elastic_agent(h, 0, mark, "joins", log)
        wait_for_lines(log, {(2, 0, 0, 1, 0), (2, 1, 0, 1, 0)})  # node 0's round 0 runs, alone
        p1 = elastic_agent(h, 1, mark, "joins", log)
        res = finish([p0, p1])
        stopped_at(mark)
        check([r[0] for r in res] == [0, 0], f"both finish: rc {[r[0] for r in res]}", str(res))
        got = elastic_lines(res[0][1])
        check(got == {(2, 0, 0, 1, 0), (2, 1, 0, 1, 0), (4, 0, 0, 2, 0), (4, 1, 0, 2, 0)},
              f"node 0: world 2 alone, then 4 with the newcomer, restart count still 0: {sorted(got)}", res[0][1])
        check(elastic_lines(res[1][1]) == {(4, 2, 1, 2, 0), (4, 3, 1, 2, 0)}, "the newcomer is node rank 1 (ranks 2, 3)",
              res[1][1])
        check("asks to join" in res[0][2], "node 0 says why it restarted", res[0][2])


def case_killed_launcher_leaves_no_grandchild():
    """kill -9 of distrun (one host): the workers and the children they started in sessions of
    their own are all gone (the reaper shim)."""
    mark = f"{TAG}-gc"
    p = subprocess.Popen([DISTRUN, "--nproc-per-node", "2", "--", PYTHON, "-c", WORKER_PY, mark],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_processes(mark, 4)
    t0 = time.time()
    p.kill()
    p.communicate(timeout=10)
    end = stopped_at(mark, within=5)
    print(f"MEASURE kill -9 of distrun: {end - t0:.2f} s until no worker or grandchild is left", flush=True)


def case_killed_shim_leaves_no_grandchild():
    """kill -9 of a worker's shim (one host): the worker dies with it, and its child in a
    session of its own, orphaned, is adopted by distrun (a subreaper) and ended with the job."""
    mark = f"{TAG}-shim"
    p = subprocess.Popen([DISTRUN, "--nproc-per-node", "2", "--", PYTHON, "-c", WORKER_PY, mark],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_processes(mark, 4)
    worker = next(pid for pid, cmd in processes_with(mark) if cmd.startswith(PYTHON) and "subprocess.Popen" in cmd)
    with open(f"/proc/{worker}/stat") as f:
        shim = int(f.read().rsplit(")", 1)[1].split()[1])
    check(shim != p.pid, "the worker runs under a shim")
    t0 = time.time()
    os.kill(shim, signal.SIGKILL)
    _, err = p.communicate(timeout=20)
    end = stopped_at(mark, within=5)
    print(f"MEASURE kill -9 of a worker's shim: {end - t0:.2f} s until no worker or grandchild is left", flush=True)
    check(p.returncode == 1, f"the job fails: rc {p.returncode}", err)


def case_inherited_descriptors_stay_out():
    """Descriptors distrun inherited (not close-on-exec) do not reach the workers: each worker
    holds its standard streams only (one host)."""
    mark = f"{TAG}-fds"
    r_fd, w_fd = os.pipe()
    os.set_inheritable(r_fd, True)
    keep = os.dup2(w_fd, 77)
    try:
        # The shell lists its own descriptors (ls is its child; $$ is the shell, the worker).
        p = subprocess.run([DISTRUN, "--nproc-per-node", "2", "--", "sh", "-c", "ls /proc/$$/fd", mark],
                           capture_output=True, text=True, timeout=30, pass_fds=(r_fd, keep))
    finally:
        for fd in (r_fd, w_fd, keep):
            os.close(fd)
    fds = {0: [], 1: []}
    for l in p.stdout.splitlines():
        rank = 1 if l.startswith("[rank1]:") else 0
        fds[rank].append(int(l.rsplit(":", 1)[-1]))
    check(p.returncode == 0, f"rc {p.returncode}", p.stdout + p.stderr)
    for rank, held in fds.items():
        check(sorted(held) == [0, 1, 2], f"worker {rank} holds only its standard streams: {held}", p.stdout)


if __name__ == "__main__":
    main({name[5:]: fn for name, fn in globals().items() if name.startswith("case_")})

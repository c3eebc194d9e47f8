#!/usr/bin/env python3
"""distrun against torch.distributed (gloo) between namespace hosts, in one interleaved run.
The hosts are network namespaces on a bridge (the multihost tests' `Hosts`); each rank is told
its host (DISTRUN_HOST_ID: the namespaces share one kernel, which would otherwise let the
ranks read each other's memory), so distrun takes its TCP path between them, as between real
hosts (with several ranks per host, shared memory within each and TCP between: hierarchical).
Both systems are started the same way: one process per rank with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (no launcher). Open MPI is the second anchor where mpirun and
mpicc exist: mpirun in the first namespace starts its daemons in each through a launch agent
(`ip netns exec`), its TCP transport between them, mpi_bench.c's figures (no send_recv; a
mean, not a median, for latency). Each repetition runs distrun-bench, then torch (torch_sweep.py:
torch_bench.py's measurement, every size in one job), then mpi_bench, on the same sizes and
iterations; distrun-bench times only the placement torch's call has (`-O`: in place for
all_reduce and broadcast, out of place otherwise; a --baseline built without `-O` times both, and
the same one is kept). The tables (hosts_table.py) give the median
over repetitions of each one's p50 (of each iteration's slowest rank) for 8 B..64 KiB all_reduce,
all_gather, broadcast and send_recv (--iters, default 100, after 5 warm-up calls), and of its
busbw for 1, 4, 16 and 64 MiB all_reduce, all_gather, reduce_scatter, all_to_all and broadcast
(a fifth of --iters at 1 and 4 MiB after 2 warm-up calls, a thirtieth, at least 3, at 16 and
64 MiB after 1: a 64 MiB call lasts 0.1 to 2 s here), beside three limits of the link measured
in the same run: the kernel's own 8-byte TCP round trip (Python sockets with TCP_NODELAY: the
interpreter's few microseconds make it slightly pessimistic), what raw TCP moves each way with
both directions busy between the first two hosts alone (one pair), and the raw ring: every rank
at once sending to the next while it receives from the previous, every hop between hosts (both
raw_ring.c, built with cc; ring() and ring_rate() say how, docs/performance.md why), a rank's
GB/s in busbw's unit. Sizes with no element per rank (all_gather's 8 B on four ranks)
are left out. --busy N runs N busy loops beside everything (a shared host). Prints the load
average before and after: the machine may be shared. Interrupted (Ctrl-C, SIGTERM, SIGHUP) or
failing, it ends every process it started and removes its namespaces.

Usage: scripts/bench/hosts.py [--build DIR] [--baseline DIR] [--hosts N] [--per-host K]
                              [--busy N] [--reps N] [--iters N] [--jsonl FILE] [--quick]
--baseline: another build's distrun-bench joins the interleaving (a change's before and after).
--baseline-env K=V: the baseline runs with these variables (e.g. DISTRUN_TCP=gloo: this build over
Gloo's pairs); without --baseline, it is this build.
--jsonl: every row (the measurements, the link's, the run's load) appended to FILE, for
hosts_table.py and plot.py --between-hosts.
Prints Markdown on stdout, with progress and each step's seconds on stderr; exits 77 (skipped)
without root or `ip netns`."""
import argparse
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
here = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's, with torch
LATENCY = ["8", "64", "512", "4K", "64K"]
LATENCY_COLLS = ["all_reduce", "all_gather", "broadcast", "send_recv"]
BUSBW = ["1M", "4M", "16M", "64M"]
BLOCKS = {"all_gather", "reduce_scatter", "all_to_all"}  # a block of the buffer per rank
BUSBW_COLLS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
IN_PLACE = {"all_reduce", "broadcast"}  # torch_bench.py's calls that work in place

PING = r"""
import socket, sys, time
addr, port, n = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if sys.argv[1] == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for _ in range(n): c.sendall(c.recv(8))
else:
    c = socket.create_connection((addr, port)); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t = []
    for _ in range(n):
        a = time.perf_counter(); c.sendall(b"x" * 8); c.recv(8); t.append(time.perf_counter() - a)
    t.sort(); print(t[len(t) // 2] * 1e6)
"""

BUSY = "while True: pass"


def die_with_parent():
    """Run in each child before it execs: it gets SIGKILL when this process ends, however it
    ends (`ip netns exec` execs the command, keeping the setting). No busy loop, rank or mpirun
    outlives the benchmark."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def size_bytes(s):
    return int(s[:-1]) * {"K": 1024, "M": 1 << 20}[s[-1]] if s[-1] in "KM" else int(s)


def addr(k):
    return f"192.0.2.{k + 1}"


def run_world(h, per_host, cmd, env, timeout=600):
    """Runs `cmd` as every rank, `per_host` to a namespace, with the world's variables; returns
    rank 0's stdout."""
    procs = []
    world = len(h.ns) * per_host
    for rank in range(world):
        host = rank // per_host
        full = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank % per_host), WORLD_SIZE=str(world),
                    LOCAL_WORLD_SIZE=str(per_host), MASTER_ADDR=addr(0), MASTER_PORT="29510",
                    DISTRUN_HOST_ID=f"host{host}", **env)
        procs.append(subprocess.Popen(["ip", "netns", "exec", h.ns[host], *cmd], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=full, preexec_fn=die_with_parent))
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"hosts.py: {cmd[0]} failed: {[(p.returncode, o[1][-2000:]) for p, o in zip(procs, outs)]}")
    return outs[0][0]


def pair(h, script, args, timeout=120):
    """`script` as a server in the second namespace and a client in the first; the client's
    last line, as a float."""
    server = subprocess.Popen(["ip", "netns", "exec", h.ns[1], PY, "-c", script, "server", addr(1), "29520", *args],
                              stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
    try:
        server.stdout.readline()
        out = subprocess.run(["ip", "netns", "exec", h.ns[0], PY, "-c", script, "client", addr(1), "29520", *args],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
        server.wait(timeout=timeout)
    finally:
        server.kill()
    return float(out.split()[-1])


def ring_order(hosts, per_host):
    """The raw ring's ranks in ring order: place 0 of every host, then place 1 of every host...
    (rank = host * per_host + place), so that every hop crosses from one host to the next, as
    distrun's traffic between hosts does (a ring between hosts; on several ranks a host, each
    local rank with its own place on the other hosts, shared memory within a host)."""
    return [h * per_host + p for p in range(per_host) for h in range(hosts)]


def ring_rate(total, spans):
    """The raw ring's figure, GB/s: the bytes every rank sent (and received) over the time from
    the first rank's start to the last one's finish (spans: (start, finish) a rank, one clock).
    A collective's busbw is in the same unit (the bytes each rank sends and receives per second
    in a bandwidth-optimal schedule: nccl-tests' bus factor), so it compares directly."""
    return total / (max(b for _, b in spans) - min(a for a, _ in spans)) / 1e9


def ring_setup(tmp):
    """raw_ring.c built into `tmp`. C, so that no interpreter is part of the limit: the same
    ring in Python moved 0.69x to 1.02x its rate (median 0.96x; 2 x 1, 4 x 1 and 2 x 2, quiet and
    beside four busy loops, 3 rounds each), the one pair in Python 0.93x quiet and 0.66x beside
    four busy loops (medians of 8 interleaved rounds, load average 7 to 9)."""
    exe = f"{tmp}/raw_ring"
    built = subprocess.run(["cc", "-O2", "-pthread", "-o", exe, os.path.join(here, "raw_ring.c")],
                           capture_output=True, text=True, timeout=120)
    if built.returncode != 0:
        sys.exit(f"hosts.py: cc could not build raw_ring.c (the raw-TCP anchors):\n{built.stderr[-2000:]}")
    return exe


def ring(h, members, total, exe, timeout=120):
    """Raw TCP around a ring of `members` ((host, port) each, in ring order; raw_ring.c, one
    process each, in its host's namespace), every one sending `total` bytes to the next while it
    receives as many from the previous: each link busy both ways at once. Two members share one
    connection both ways, as a pair of ranks does. Returns ring_rate's GB/s."""
    procs = []
    try:
        for i, (host, port) in enumerate(members):
            nxt, nport = members[(i + 1) % len(members)]
            args = [addr(host), str(port), addr(nxt), str(nport), str(total)]
            if len(members) == 2:  # the next is the previous: one connection both ways
                args.append(("connect", "accept")[i])
            procs.append(subprocess.Popen(["ip", "netns", "exec", h.ns[host], exe, *args],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                          preexec_fn=die_with_parent))
        for want in ("listening", "ready"):  # every rank listens before any connects, and is
            for p in procs:                  # connected both ways before any sends
                if p.stdout.readline().strip() != want:
                    sys.exit(f"hosts.py: a raw ring rank failed before '{want}' (exit {p.wait(timeout)})")
            for p in procs:
                p.stdin.write("\n")
                p.stdin.flush()
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
        if any(p.returncode != 0 for p in procs):
            sys.exit(f"hosts.py: the raw ring failed: exits {[p.returncode for p in procs]}")
    finally:
        for p in procs:
            p.kill()
    return ring_rate(total, [tuple(map(float, o.split()[-2:])) for o in outs])


def times_one_placement(bench, env=None):
    """Whether `bench` takes -O (one placement timed); a baseline built before it times both."""
    return "--out_of_place" in subprocess.run([bench, "--help"], capture_output=True, text=True, timeout=60,
                                              env=dict(os.environ, **(env or {}))).stdout


def distrun(h, per_host, bench, coll, sizes, iters, warmup, json_path, env=None, one_placement=True):
    # One run from the smallest size to the largest, each `factor` times the last (doubling where
    # `sizes` grow unevenly); only `sizes` are kept.
    ratios = {size_bytes(b) // size_bytes(a) for a, b in zip(sizes, sizes[1:])}
    factor = ratios.pop() if len(ratios) == 1 else 2
    # Only the placement torch's call has is timed: in place where it is in place (all_reduce,
    # broadcast: out of place adds a copy torch does not make), out of place otherwise.
    placement = "in_place" if coll in IN_PLACE else "out_of_place"
    args = [bench, coll, "-n", str(iters), "-w", str(warmup), "-c", "0", "-J", json_path, "-b", sizes[0], "-e",
            sizes[-1], "-f", str(factor),
            *(["-O", str(int(placement == "out_of_place"))] if one_placement else [])]
    run_world(h, per_host, args, {"DISTRUN_STORE_SECRET": "hosts-bench", **(env or {})})
    with open(json_path) as f:
        doc = json.load(f)
    # Each -J row's figures under the keys torch_bench.py's rows have (p50: of each iteration's
    # slowest rank in both).
    rows = [{**r[placement], "bytes": r["size"], "busbw_gbps": r[placement]["bus_bw"]} for r in doc["results"]]
    return {r["bytes"]: r for r in rows if r["bytes"] in {size_bytes(s) for s in sizes}}


def torch(h, per_host, plan):
    """torch.distributed's rows for every (collectives, sizes, iterations, warm-up) group of
    `plan`, in one job: a start of torch on every rank costs more than most groups' calls."""
    cmd = [PY, os.path.join(here, "torch_sweep.py"),
           *(f"--group={','.join(sizes)}:{iters}:{warmup}:{','.join(colls)}" for colls, sizes, iters, warmup in plan)]
    out = run_world(h, per_host, cmd, {"GLOO_SOCKET_IFNAME": "eth0"})
    got = {}
    for row in map(json.loads, (l for l in out.splitlines() if l.startswith("{"))):
        if "error" not in row:
            got.setdefault(row["collective"], {})[row["bytes"]] = row
    return got


MPI_COLLS = {"all_reduce", "all_gather", "broadcast", "all_to_all", "reduce_scatter"}  # mpi_bench.c's
# Open MPI's launch agent: `agent HOST COMMAND...` runs its daemon inside the namespace HOST,
# under the host name HOST (a UTS namespace): the namespaces share /dev/shm, and Open MPI's
# shared-memory files are named after the host, so two hosts of one name crash each other.
AGENT = """#!/bin/sh
host=$1; shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
"""


def mpi_setup(h, per_host, tmp):
    """mpi_bench built and the files mpirun needs to start a rank per slot in each namespace;
    None (and why, on stderr) where Open MPI is missing."""
    if not all(shutil.which(t) for t in ("mpirun", "mpicc")):
        print("hosts.py: no mpirun/mpicc: Open MPI not measured", file=sys.stderr)
        return None
    exe, agent, hostfile = f"{tmp}/mpi_bench", f"{tmp}/agent.sh", f"{tmp}/hostfile"
    subprocess.run(["mpicc", "-O2", "-o", exe, os.path.join(here, "mpi_bench.c")], check=True)
    with open(agent, "w") as f:
        f.write(AGENT)
    os.chmod(agent, 0o755)
    with open(hostfile, "w") as f:
        f.writelines(f"{ns} slots={per_host}\n" for ns in h.ns)
    return exe, agent, hostfile


def mpi(h, per_host, setup, plan, failures):
    """Open MPI 4's TCP transport between the namespaces (shared memory within one), mpirun in
    the first namespace starting its daemons through the agent. Ranks yield when idle: on an
    oversubscribed machine busy-polling ranks take each other's cores (8 B all_reduce: 21 ms
    a call spinning, 26 us yielding, in one trial here). Its latency figure is mpi_bench's
    mean, not a median."""
    if not setup:
        return {}
    exe, agent, hostfile = setup
    # Every group of the plan in one job, in turn: mpirun's start costs about a second.
    groups = [([c for c in colls if c in MPI_COLLS], sizes, iters, warmup) for colls, sizes, iters, warmup in plan]
    args = [a for colls, sizes, iters, warmup in groups if colls
            for a in (",".join(colls), ",".join(sizes), str(iters), str(warmup))]
    if not args:
        return {}
    cmd = ["ip", "netns", "exec", h.ns[0], "mpirun", "--allow-run-as-root", "--hostfile", hostfile,
           "-np", str(len(h.ns) * per_host), "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include",
           "eth0", "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl", "self,vader,tcp", "--mca",
           "mpi_yield_when_idle", "1", exe, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, preexec_fn=die_with_parent)
    if out.returncode != 0:
        print(f"hosts.py: mpirun failed ({out.returncode}): {out.stderr[-1000:]}", file=sys.stderr)
        failures.append(out.returncode)
    got = {}
    for line in out.stdout.splitlines():
        try:  # a job that aborted may have cut its last line short
            row = json.loads(line) if line.startswith("{") else None
        except ValueError:
            continue
        if row:
            got.setdefault(row["collective"], {})[row["bytes"]] = {**row, "p50_us": row["time_us"]}
    return got


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--baseline", help="another build directory, measured alongside")
    ap.add_argument("--baseline-env", action="append", default=[], metavar="K=V",
                    help="variables of the baseline's runs (repeatable)")
    ap.add_argument("--hosts", type=int, default=2, help="namespace hosts (2 to 4)")
    ap.add_argument("--per-host", type=int, default=1, help="ranks per host")
    ap.add_argument("--busy", type=int, default=0, help="busy loops running beside the measurement")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=100,
                    help="timed iterations per latency size (busbw: a fifth at 1 and 4 MiB, a 30th at 16 and 64)")
    ap.add_argument("--jsonl", help="append every row to this file")
    ap.add_argument("--quick", action="store_true", help="all_reduce and send_recv latency, all_reduce busbw only")
    ap.add_argument("--only", choices=["latency", "busbw"], help="one of the two tables")
    ap.add_argument("--no-mpi", nargs="?", const="", metavar="WHY",
                    help="leave Open MPI out (WHY: said under the tables)")
    ap.add_argument("--collectives", help="comma-separated: only these of each table's collectives")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    lat_colls = [] if a.only == "busbw" else ["all_reduce", "send_recv"] if a.quick else LATENCY_COLLS
    bw_colls = [] if a.only == "latency" else ["all_reduce"] if a.quick else BUSBW_COLLS
    if a.collectives:
        lat_colls = [c for c in lat_colls if c in a.collectives.split(",")]
        bw_colls = [c for c in bw_colls if c in a.collectives.split(",")]
    os.environ["DISTRUN"] = os.path.join(os.path.abspath(a.build), "bin", "distrun")
    sys.path.insert(0, os.path.join(root, "tests", "launcher"))
    from multihost_test import Hosts  # noqa: E402 (needs DISTRUN set first)
    import hosts_table  # noqa: E402

    benches = {"distrun": os.path.join(os.path.abspath(a.build), "bin", "distrun-bench")}
    if a.baseline or a.baseline_env:
        benches["baseline"] = os.path.join(os.path.abspath(a.baseline or a.build), "bin", "distrun-bench")
    envs = {"baseline": dict(kv.split("=", 1) for kv in a.baseline_env)}
    # A baseline build copied out of its build tree still finds its own library, not ours.
    if a.baseline and os.path.isdir(os.path.join(a.baseline, "lib")):
        envs["baseline"].setdefault("LD_LIBRARY_PATH", os.path.join(os.path.abspath(a.baseline), "lib"))
    for bench in benches.values():
        if not os.access(bench, os.X_OK):
            sys.exit(f"hosts.py: {bench} not built (scripts/build.sh)")
    world = a.hosts * a.per_host
    where = {"hosts": a.hosts, "per_host": a.per_host, "world_size": world, "busy": a.busy}
    # (collectives, sizes, iterations, warm-up calls), every system alike; sizes up to 64 KiB
    # are latency points, larger ones busbw points
    plan = [(lat_colls, LATENCY, a.iters, 5), (bw_colls, BUSBW[:2], max(3, a.iters // 5), 2),
            (bw_colls, BUSBW[2:], max(3, a.iters // 30), 1)]
    plan = [g for g in plan if g[0]]
    label = f"[hosts {a.hosts} x {a.per_host}, {a.busy} busy]"
    started = time.monotonic()

    def note(text):
        print(f"{label} {time.monotonic() - started:5.0f} s: {text}", file=sys.stderr, flush=True)

    if not shutil.which("cc"):  # before any namespace is made
        sys.exit("hosts.py: no cc to build raw_ring.c (the raw-TCP anchors) with")
    busy = []
    versions = set()  # torch's, as its rows give it
    mpi_why = None
    mpi_failures = []
    load_before = open("/proc/loadavg").read().split()[:3]
    rows = []
    try:
        busy = [subprocess.Popen([PY, "-c", BUSY], preexec_fn=die_with_parent) for _ in range(a.busy)]
        with Hosts(a.hosts) as h, tempfile.TemporaryDirectory() as tmp:
            mpi_ready = None if a.no_mpi is not None else mpi_setup(h, a.per_host, tmp)
            ring_exe = ring_setup(tmp)
            ring_members = [(r // a.per_host, 29540 + r) for r in ring_order(a.hosts, a.per_host)]
            # Why Open MPI's column is empty, for the tables.
            mpi_why = (f"left out (--no-mpi{': ' + a.no_mpi if a.no_mpi else ''})" if a.no_mpi is not None else
                       None if mpi_ready else "mpirun or mpicc not found")
            one = {system: times_one_placement(bench, envs.get(system)) for system, bench in benches.items()}

            def ours(system, bench):
                got = {}
                for colls, sizes, iters, warmup in plan:
                    for c in colls:
                        got.setdefault(c, {}).update(distrun(h, a.per_host, bench, c, sizes, iters, warmup,
                                                             f"{tmp}/d.json", envs.get(system), one[system]))
                return got
            # Each repetition: every distrun build, then torch, then Open MPI, on the same plan.
            runs = {system: lambda system=system, bench=bench: ours(system, bench) for system, bench in benches.items()}
            runs["torch"] = lambda: torch(h, a.per_host, plan)
            runs["mpi"] = lambda: mpi(h, a.per_host, mpi_ready, plan, mpi_failures)
            for rep in range(a.reps):
                at = time.monotonic()
                # Raw TCP between the first two hosts alone (one pair, a process each), and the
                # raw ring: every rank of the placement at once, each hop to the next host.
                rows.append({"kind": "link", "rep": rep + 1, **where, "rtt_us": pair(h, PING, ["2000"]),
                             "tcp_gbps": ring(h, [(0, 29530), (1, 29531)], 256 << 20, ring_exe),
                             "ring_gbps": ring(h, ring_members, 256 << 20, ring_exe)})
                took = {"link": time.monotonic() - at}
                for system, run in runs.items():
                    at = time.monotonic()
                    got = run()
                    took[system] = time.monotonic() - at
                    versions.update(r["torch"] for by_size in got.values() for r in by_size.values() if "torch" in r)
                    for coll, by_size in got.items():
                        for b, r in by_size.items():
                            if coll in BLOCKS and b // 4 < world:
                                continue  # no element per rank: nothing to compare
                            rows.append({"kind": "latency" if b <= size_bytes(LATENCY[-1]) else "busbw",
                                         "rep": rep + 1, "system": system, "collective": coll, **where, "bytes": b,
                                         "p50_us": r.get("p50_us"), "busbw_gbps": r["busbw_gbps"]})
                note(f"repetition {rep + 1} of {a.reps} done (" +
                     ", ".join(f"{k} {v:.0f} s" for k, v in took.items()) + ")")
    finally:
        for p in busy:
            p.kill()
    load_after = open("/proc/loadavg").read().split()[:3]
    if mpi_failures:
        mpi_why = (f"mpirun failed in {len(mpi_failures)} of {a.reps} repetitions (exit "
                   f"{', '.join(map(str, mpi_failures))}), each losing its groups after the failure")
    rows.append({"kind": "run", **where, "reps": a.reps, "iters": a.iters, "load_before": load_before,
                 "load_after": load_after, "torch": ", ".join(sorted(versions)) or None, "mpi": mpi_why,
                 "cores": os.cpu_count(),
                 "baseline": f"{a.baseline or 'this build'} {' '.join(a.baseline_env)}".strip()
                 if "baseline" in benches else None})
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    sys.stdout.write(hosts_table.tables(rows))


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt as e:
        sys.exit(f"hosts.py: interrupted ({e or 'Ctrl-C'}); its processes ended and namespaces removed")

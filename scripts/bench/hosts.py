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
mean, not a median, for latency). Each repetition runs distrun-bench, then torch_bench.py,
then mpi_bench, on the same sizes; the tables give the median over repetitions of each one's
p50 (every rank's iterations pooled) for 8 B..64 KiB all_reduce, all_gather, broadcast and
send_recv, and of its busbw for 1..64 MiB all_reduce, all_gather, reduce_scatter, all_to_all
and broadcast, beside two limits of the link measured in the same run: the kernel's own 8-byte
TCP round trip and what raw TCP moves each way with both directions busy (Python sockets
with TCP_NODELAY: the interpreter's few microseconds make both slightly pessimistic).
--busy N runs N busy loops beside everything (a shared host). Prints the load average before
and after: the machine may be shared.

Usage: scripts/bench/hosts.py [--build DIR] [--baseline DIR] [--hosts N] [--per-host K]
                              [--busy N] [--reps N] [--iters N] [--jsonl FILE] [--quick]
--baseline: another build's distrun-bench joins the interleaving (a change's before and after).
--baseline-env K=V: the baseline runs with these variables (e.g. DISTRUN_TCP=gloo: this build over
Gloo's pairs); without --baseline, it is this build.
--jsonl: every measured row (busbw rows in compare.sh's form, for plot.py) appended to FILE.
Prints Markdown on stdout; exits 77 (skipped) without root or `ip netns`."""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
here = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's, with torch
LATENCY = ["8", "64", "512", "4K", "64K"]
LATENCY_COLLS = ["all_reduce", "all_gather", "broadcast", "send_recv"]
BUSBW = ["1M", "4M", "16M", "64M"]
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

# Both ends send `total` bytes and receive as many at once (a thread each way); each prints
# the bytes it received per second. Both directions busy, as in a collective's exchange.
STREAM = r"""
import socket, sys, threading, time
role, addr, port, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
if role == "server":
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind((addr, port)); s.listen(1)
    print("ready", flush=True)
    c, _ = s.accept()
else:
    c = socket.create_connection((addr, port))
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
chunk = memoryview(bytearray(4 << 20))
def send():
    left = total
    while left:
        n = min(left, len(chunk)); c.sendall(chunk[:n]); left -= n
t = threading.Thread(target=send); a = time.perf_counter(); t.start()
buf, got = memoryview(bytearray(4 << 20)), 0
while got < total:
    got += c.recv_into(buf)
t.join(); print(total / (time.perf_counter() - a) / 1e9, flush=True)
"""

BUSY = "while True: pass"


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
                                      stderr=subprocess.PIPE, text=True, env=full))
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
                              stdout=subprocess.PIPE, text=True)
    try:
        server.stdout.readline()
        out = subprocess.run(["ip", "netns", "exec", h.ns[0], PY, "-c", script, "client", addr(1), "29520", *args],
                             capture_output=True, text=True, timeout=timeout, check=True).stdout
        server.wait(timeout=timeout)
    finally:
        server.kill()
    return float(out.split()[-1])


def distrun(h, per_host, bench, coll, sizes, iters, json_path, env=None):
    # One run from the smallest size to the largest, doubling; only `sizes` are kept.
    args = [bench, coll, "-n", str(iters), "-w", "5", "-c", "0", "-J", json_path, "-b", sizes[0], "-e", sizes[-1],
            "-f", "2"]
    run_world(h, per_host, args, {"DISTRUN_STORE_SECRET": "hosts-bench", **(env or {})})
    with open(json_path) as f:
        doc = json.load(f)
    # Each -J row's figures under the keys torch_bench.py's rows have: in place where torch's
    # call is in place (all_reduce, broadcast: the out-of-place row adds a copy torch does not
    # make), out of place otherwise.
    placement = "in_place" if coll in IN_PLACE else "out_of_place"
    rows = [{**r[placement], "bytes": r["size"], "busbw_gbps": r[placement]["bus_bw"]} for r in doc["results"]]
    return {r["bytes"]: r for r in rows if r["bytes"] in {size_bytes(s) for s in sizes}}


def torch(h, per_host, colls, sizes, iters):
    cmd = [PY, os.path.join(here, "torch_bench.py"), "--collectives", ",".join(colls), "--sizes", ",".join(sizes),
           "--iters", str(iters), "--warmup", "5"]
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


def mpi(h, per_host, setup, colls, sizes, iters):
    """Open MPI 4's TCP transport between the namespaces (shared memory within one), mpirun in
    the first namespace starting its daemons through the agent. Ranks yield when idle: on an
    oversubscribed machine busy-polling ranks take each other's cores (8 B all_reduce: 21 ms
    a call spinning, 26 us yielding, in one trial here). Its latency figure is mpi_bench's
    mean, not a median."""
    colls = [c for c in colls if c in MPI_COLLS]
    if not setup or not colls:
        return {}
    exe, agent, hostfile = setup
    cmd = ["ip", "netns", "exec", h.ns[0], "mpirun", "--allow-run-as-root", "--hostfile", hostfile,
           "-np", str(len(h.ns) * per_host), "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", "eth0",
           "--mca", "btl_tcp_if_include", "eth0", "--mca", "btl", "self,vader,tcp", "--mca", "mpi_yield_when_idle",
           "1", exe, ",".join(colls), ",".join(sizes), str(iters), "5"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        print(f"hosts.py: mpirun failed ({out.returncode}): {out.stderr[-1000:]}", file=sys.stderr)
        return {}
    got = {}
    for row in map(json.loads, (l for l in out.stdout.splitlines() if l.startswith("{"))):
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
    ap.add_argument("--iters", type=int, default=200, help="timed iterations per latency size (busbw: a tenth)")
    ap.add_argument("--jsonl", help="append every measured row to this file")
    ap.add_argument("--quick", action="store_true", help="all_reduce and send_recv latency, all_reduce busbw only")
    ap.add_argument("--only", choices=["latency", "busbw"], help="one of the two tables")
    ap.add_argument("--no-mpi", action="store_true", help="leave Open MPI out")
    ap.add_argument("--collectives", help="comma-separated: only these of each table's collectives")
    a = ap.parse_args()
    lat_colls = [] if a.only == "busbw" else ["all_reduce", "send_recv"] if a.quick else LATENCY_COLLS
    bw_colls = [] if a.only == "latency" else ["all_reduce"] if a.quick else BUSBW_COLLS
    if a.collectives:
        lat_colls = [c for c in lat_colls if c in a.collectives.split(",")]
        bw_colls = [c for c in bw_colls if c in a.collectives.split(",")]
    os.environ["DISTRUN"] = os.path.join(os.path.abspath(a.build), "bin", "distrun")
    sys.path.insert(0, os.path.join(root, "tests", "launcher"))
    from multihost_test import Hosts  # noqa: E402 (needs DISTRUN set first)

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
    busy = [subprocess.Popen([PY, "-c", BUSY]) for _ in range(a.busy)]
    load_before = open("/proc/loadavg").read().split()[:3]
    lat = {}  # (system, collective, bytes) -> [p50 of each rep]
    bw = {}   # (system, collective, bytes) -> [busbw of each rep]
    rtt, stream = [], []
    rows = []
    try:
        with Hosts(a.hosts) as h, tempfile.TemporaryDirectory() as tmp:
            mpi_ready = None if a.no_mpi else mpi_setup(h, a.per_host, tmp)
            for rep in range(a.reps):
                rtt.append(pair(h, PING, ["2000"]))
                stream.append(pair(h, STREAM, [str(256 << 20)]))
                for group, colls, sizes, iters, into, key in (
                        ("latency", lat_colls, LATENCY, a.iters, lat, "p50_us"),
                        ("busbw", bw_colls, BUSBW, max(3, a.iters // 20), bw, "busbw_gbps")):
                    if not colls:
                        continue
                    got = {system: {c: distrun(h, a.per_host, bench, c, sizes, iters, f"{tmp}/d.json",
                                               envs.get(system)) for c in colls}
                           for system, bench in benches.items()}
                    got["torch"] = torch(h, a.per_host, colls, sizes, iters)
                    got["mpi"] = mpi(h, a.per_host, mpi_ready, colls, sizes, iters)
                    for system, by_coll in got.items():
                        for coll, by_size in by_coll.items():
                            for b, r in by_size.items():
                                into.setdefault((system, coll, b), []).append(r[key])
                                rows.append({"kind": group, "rep": rep + 1, "system": system, "collective": coll,
                                             "world_size": world, "hosts": a.hosts, "busy": a.busy, "bytes": b,
                                             "p50_us": r["p50_us"], "busbw_gbps": r["busbw_gbps"]})
                print(f"rep {rep + 1}/{a.reps}: done", file=sys.stderr, flush=True)
    finally:
        for p in busy:
            p.kill()
    load_after = open("/proc/loadavg").read().split()[:3]
    if a.jsonl:
        with open(a.jsonl, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
    med = statistics.median

    def cell(system, coll, b, table, fmt):
        v = table.get((system, coll, b))
        return fmt % med(v) if v else "n/a"

    def ratio(coll, b, table, system="distrun", over="torch"):
        d, t = table.get((system, coll, b)), table.get((over, coll, b))
        return f"**{med(d) / med(t):.2f}x**" if d and t else "n/a"

    torch_version = subprocess.run([PY, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True).stdout.strip()
    print(f"{a.hosts} hosts (network namespaces on a bridge, one kernel) x {a.per_host} rank(s), "
          f"{'quiet' if not a.busy else f'beside {a.busy} busy loops'}: distrun against torch {torch_version} gloo; "
          f"medians of {a.reps} interleaved repetitions; load average {' '.join(load_before)} before, "
          f"{' '.join(load_after)} after, on {os.cpu_count()} cores\n")
    print(f"The link: kernel 8-byte TCP round trip {med(rtt):.1f} us (reps: {', '.join(f'{x:.1f}' for x in rtt)}); "
          f"raw TCP each way, both directions busy, {med(stream):.3f} GB/s (reps: "
          f"{', '.join(f'{x:.3f}' for x in stream)})\n")
    for head, colls, sizes, table, fmt, unit, limit, limit_name in (
            ("distrun p50 us | torch p50 us | Open MPI mean us", lat_colls, LATENCY, lat, "%.1f", " B", med(rtt),
             "round trip"),
            ("distrun busbw GB/s | torch | Open MPI", bw_colls, BUSBW, bw, "%.3f", "iB", med(stream), "raw TCP")):
        if not colls:
            continue
        print(f"| collective | size | {head} | distrun / torch | distrun / Open MPI | distrun / {limit_name} |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for coll in colls:
            for s in sizes:
                b = size_bytes(s)
                d = table.get(("distrun", coll, b))
                print(f"| {coll} | {s}{unit} | {cell('distrun', coll, b, table, fmt)} | "
                      f"{cell('torch', coll, b, table, fmt)} | {cell('mpi', coll, b, table, fmt)} | "
                      f"{ratio(coll, b, table)} | {ratio(coll, b, table, over='mpi')} | "
                      f"{f'{med(d) / limit:.2f}x' if d else 'n/a'} |")
        print()
    if "baseline" in benches:
        print(f"Baseline ({a.baseline or 'this build'} {' '.join(a.baseline_env)}), same runs: this build's p50 time or busbw relative to it\n")
        print("| measure | collective | size | baseline | this build | this / baseline |")
        print("|---|---|---:|---:|---:|---:|")
        for measure, colls, sizes, table, fmt in (("p50 us", lat_colls, LATENCY, lat, "%.1f"),
                                                  ("busbw GB/s", bw_colls, BUSBW, bw, "%.3f")):
            for coll in colls:
                for s in sizes:
                    b = size_bytes(s)
                    print(f"| {measure} | {coll} | {s} | {cell('baseline', coll, b, table, fmt)} | "
                          f"{cell('distrun', coll, b, table, fmt)} | {ratio(coll, b, table, 'distrun', 'baseline')} |")


if __name__ == "__main__":
    main()

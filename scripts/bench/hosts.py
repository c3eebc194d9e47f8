#!/usr/bin/env python3
"""distrun against torch.distributed (gloo) between two hosts, one rank each, in one interleaved
run. The hosts are network namespaces on a bridge (the multihost tests' `Hosts`); each rank
is told its host (DISTRUN_HOST_ID: the namespaces share one kernel, which would otherwise let
the ranks read each other's memory), so distrun takes its TCP path, as between real hosts.
Both systems are started the same way: one process per namespace with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT (no launcher). Each repetition runs distrun-bench, then
torch_bench.py, on the same sizes; the tables give the median over repetitions of each one's
p50 (every rank's iterations pooled) for 8 B..64 KiB all_reduce and send_recv, and of its
busbw for 1..16 MiB all_reduce, beside the kernel's own 8-byte TCP round trip between the
namespaces (a Python ping-pong with TCP_NODELAY: an upper bound, by the interpreter's few
microseconds). Prints the load average before and after: the machine may be shared.

Usage: scripts/bench/hosts.py [--build DIR] [--baseline DIR] [--reps N] [--iters N]
--baseline: another build's distrun-bench joins the interleaving (a change's before and after).
Prints Markdown on stdout; exits 77 (skipped) without root or `ip netns`."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
here = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"  # Debian's, with torch
LATENCY = ["8", "64", "512", "4K", "64K"]
BUSBW = ["1M", "4M", "16M"]

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


def size_bytes(s):
    return int(s[:-1]) * {"K": 1024, "M": 1 << 20}[s[-1]] if s[-1] in "KM" else int(s)


def run_pair(h, cmds, env, timeout=300):
    """Runs cmds[k] in namespace k with the world's variables; returns rank 0's stdout."""
    procs = []
    for k, cmd in enumerate(cmds):
        full = dict(os.environ, RANK=str(k), LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1",
                    MASTER_ADDR="192.0.2.1", MASTER_PORT="29510", DISTRUN_HOST_ID=f"host{k}", **env)
        procs.append(subprocess.Popen(["ip", "netns", "exec", h.ns[k], *cmd], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=full))
    outs = [p.communicate(timeout=timeout) for p in procs]
    if any(p.returncode != 0 for p in procs):
        sys.exit(f"hosts.py: {cmds[0][0]} failed: {[(p.returncode, o[1][-2000:]) for p, o in zip(procs, outs)]}")
    return outs[0][0]


def kernel_rtt(h, n=2000):
    server = subprocess.Popen(["ip", "netns", "exec", h.ns[1], PY, "-c", PING, "server", "192.0.2.2", "29520", str(n)],
                              stdout=subprocess.PIPE, text=True)
    server.stdout.readline()
    out = subprocess.run(["ip", "netns", "exec", h.ns[0], PY, "-c", PING, "client", "192.0.2.2", "29520", str(n)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    server.wait(timeout=30)
    return float(out)


def distrun(h, bench, coll, sizes, iters, json_path):
    # 2 sizes a factor 8 apart cover LATENCY's 8..4K; 64K is asked for alone below.
    args = [bench, coll, "-n", str(iters), "-w", "5", "-c", "0", "-J", json_path]
    run_pair(h, [[*args, "-b", sizes[0], "-e", sizes[-1], "-f", "2"]] * 2, {"DISTRUN_STORE_SECRET": "hosts-bench"})
    with open(json_path) as f:
        doc = json.load(f)
    # Each -J row's out-of-place figures, under the keys torch_bench.py's rows have.
    rows = [{**r["out_of_place"], "bytes": r["size"], "busbw_gbps": r["out_of_place"]["bus_bw"]} for r in doc["results"]]
    return {r["bytes"]: r for r in rows if r["bytes"] in {size_bytes(s) for s in sizes}}


def torch(h, coll, sizes, iters):
    cmd = [PY, os.path.join(here, "torch_bench.py"), "--collectives", coll, "--sizes", ",".join(sizes),
           "--iters", str(iters), "--warmup", "5"]
    out = run_pair(h, [cmd] * 2, {"GLOO_SOCKET_IFNAME": "eth0"})
    return {r["bytes"]: r for r in map(json.loads, (l for l in out.splitlines() if l.startswith("{")))}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--baseline", help="another build directory, measured alongside")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", type=int, default=200, help="timed iterations per latency size (busbw: a tenth)")
    a = ap.parse_args()
    os.environ["DISTRUN"] = os.path.join(os.path.abspath(a.build), "bin", "distrun")
    sys.path.insert(0, os.path.join(root, "tests", "launcher"))
    from multihost_test import Hosts  # noqa: E402 (needs DISTRUN set first)

    benches = {"distrun": os.path.join(os.path.abspath(a.build), "bin", "distrun-bench")}
    if a.baseline:
        benches["baseline"] = os.path.join(os.path.abspath(a.baseline), "bin", "distrun-bench")
    for bench in benches.values():
        if not os.access(bench, os.X_OK):
            sys.exit(f"hosts.py: {bench} not built (scripts/build.sh)")
    load_before = open("/proc/loadavg").read().split()[:3]
    lat = {}  # (system, collective, bytes) -> [p50 of each rep]
    bw = {}   # (system, bytes) -> [busbw of each rep]
    rtt = []
    with Hosts(2) as h, tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            rtt.append(kernel_rtt(h))
            for coll in ("all_reduce", "send_recv"):
                got = {}
                for system, bench in benches.items():
                    got[system] = distrun(h, bench, coll, LATENCY[:-1], a.iters, f"{tmp}/d.json")
                    got[system].update(distrun(h, bench, coll, LATENCY[-1:], a.iters, f"{tmp}/d.json"))
                got["torch"] = torch(h, coll, LATENCY, a.iters)
                for system, rows in got.items():
                    for b, r in rows.items():
                        lat.setdefault((system, coll, b), []).append(r["p50_us"])
            got = {system: distrun(h, bench, "all_reduce", BUSBW, max(3, a.iters // 10), f"{tmp}/d.json")
                   for system, bench in benches.items()}
            got["torch"] = torch(h, "all_reduce", BUSBW, max(3, a.iters // 10))
            for system, rows in got.items():
                for b, r in rows.items():
                    bw.setdefault((system, b), []).append(r["busbw_gbps"])
            print(f"rep {rep + 1}/{a.reps}: done", file=sys.stderr, flush=True)
    load_after = open("/proc/loadavg").read().split()[:3]
    med = statistics.median
    print(f"2 hosts (network namespaces on a bridge, one kernel) x 1 rank, distrun's TCP path against torch "
          f"{subprocess.run([PY, '-c', 'import torch; print(torch.__version__)'], capture_output=True, text=True).stdout.strip()}"
          f" gloo; medians of {a.reps} interleaved repetitions; load average {' '.join(load_before)} before, "
          f"{' '.join(load_after)} after, on {os.cpu_count()} cores\n")
    print(f"Kernel 8-byte TCP round trip between the namespaces: {med(rtt):.1f} us (reps: "
          f"{', '.join(f'{x:.1f}' for x in rtt)})\n")
    print("| size | all_reduce distrun p50 us | torch | distrun / torch | send_recv distrun p50 us | torch | distrun / torch |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for s in LATENCY:
        b = size_bytes(s)
        cells = []
        for coll in ("all_reduce", "send_recv"):
            d, t = med(lat[("distrun", coll, b)]), med(lat[("torch", coll, b)])
            cells += [f"{d:.1f}", f"{t:.1f}", f"**{d / t:.2f}x**"]
        print(f"| {s} B | " + " | ".join(cells) + " |")
    print("\n| size | all_reduce distrun busbw GB/s | torch | distrun / torch |")
    print("|---:|---:|---:|---:|")
    for s in BUSBW:
        b = size_bytes(s)
        d, t = med(bw[("distrun", b)]), med(bw[("torch", b)])
        print(f"| {s}iB | {d:.3f} | {t:.3f} | **{d / t:.2f}x** |")
    if a.baseline:
        print(f"\nBaseline ({a.baseline}), same runs: p50 us / busbw GB/s, and this build's time or busbw "
              f"relative to it\n")
        print("| measure | size | baseline | this build | this / baseline |")
        print("|---|---:|---:|---:|---:|")
        for coll in ("all_reduce", "send_recv"):
            for s in LATENCY:
                d, o = med(lat[("distrun", coll, size_bytes(s))]), med(lat[("baseline", coll, size_bytes(s))])
                print(f"| {coll} p50 | {s} B | {o:.1f} | {d:.1f} | {d / o:.2f}x |")
        for s in BUSBW:
            d, o = med(bw[("distrun", size_bytes(s))]), med(bw[("baseline", size_bytes(s))])
            print(f"| all_reduce busbw | {s}iB | {o:.3f} | {d:.3f} | {d / o:.2f}x |")


if __name__ == "__main__":
    main()

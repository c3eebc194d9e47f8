#!/usr/bin/env python3
"""A TCP job of N ranks on one host, distrun's sockets against Gloo's full mesh, in one run.

Each run starts N distrun-worker processes (as hosts.py starts ranks: RANK, WORLD_SIZE,
MASTER_ADDR; no launcher) in a network namespace of its own, with DISTRUN_TRANSPORT=tcp and
DISTRUN_TCP=socket or gloo, on a job of one all_reduce; it reports the wall time from the first
start to the last exit and the connections the ranks opened (sockets: the ranks' own count, in
their debug log; Gloo: its full mesh, n(n-1)/2). The two kinds alternate, so both see the same
load. As root (ip netns); exits 77 otherwise.

Usage: scripts/bench/data_plane.py [--build DIR] [--ranks 64,128,256] [--elements 32768] [--reps 1]
--elements: the all_reduce's float32 elements (32768 = 128 KiB: the ring on TCP past 64 KiB; 4:
the direct algorithm, every rank reading every peer). The worker also gathers each step's report
to rank 0 and ends with an 8-byte all_reduce of the wrong-value count: direct with
DISTRUN_ALGO=auto, so every pair connects then; DISTRUN_ALGO=ring (inherited from the
environment) leaves only the rings and rank 0's gather. Prints one JSON line per run."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(build, n, kind, job, timeout):
    ns = f"distrun-dp{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        start = time.monotonic()
        procs = []
        for r in range(n):
            env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n), LOCAL_WORLD_SIZE=str(n),
                       MASTER_ADDR="127.0.0.1", MASTER_PORT="29540", DISTRUN_STORE_SECRET="data-plane",
                       DISTRUN_TRANSPORT="tcp", DISTRUN_TCP=kind)
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, os.path.join(build, "bin", "distrun-worker"),
                                           "--log-level", "debug", job], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE, text=True, env=env))
        errs, late = [], False
        try:
            for p in procs:
                errs.append(p.communicate(timeout=max(0.1, start + timeout - time.monotonic()))[1])
        except subprocess.TimeoutExpired:
            late = True
        finally:
            for p in procs:
                p.kill()
        wall = time.monotonic() - start
        if late:
            return {"ranks": n, "tcp": kind, "algo": os.environ.get("DISTRUN_ALGO", "auto"), "wall_s": round(wall, 2),
                    "error": f"not done after {timeout:.0f} s (killed)",
                    "load": " ".join(open("/proc/loadavg").read().split()[:3])}
        failed = [r for r, p in enumerate(procs) if p.returncode != 0]
        opened = sum(int(m.group(1)) for e in errs for m in re.finditer(r"(\d+) tcp connections opened", e))
        row = {"ranks": n, "tcp": kind, "algo": os.environ.get("DISTRUN_ALGO", "auto"), "wall_s": round(wall, 2), "failed_ranks": len(failed),
               # Each connection is counted by both of its ends.
               "connections": opened // 2 if kind == "socket" else n * (n - 1) // 2,
               "load": " ".join(open("/proc/loadavg").read().split()[:3])}
        if failed:
            row["error"] = errs[failed[0]].strip().splitlines()[-1][-300:] if errs[failed[0]].strip() else "?"
        return row
    finally:
        subprocess.run(["ip", "netns", "del", ns])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--ranks", default="64,128,256")
    ap.add_argument("--elements", type=int, default=32768)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300, help="seconds a run may take")
    a = ap.parse_args()
    if os.geteuid() != 0 or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        print("data_plane.py: needs root and ip netns", file=sys.stderr)
        sys.exit(77)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as job:
        # The store join and every collective may take minutes when hundreds of ranks start
        # on two cores.
        job.write(f'timeout: {int(a.timeout)}\ntensors:\n  x: {{shape: [{a.elements}], fill: "rank"}}\n'
                  "steps:\n  - {op: all_reduce, input: x, reduce: sum}\n")
        job.flush()
        for n in map(int, a.ranks.split(",")):
            for _ in range(a.reps):
                for kind in ("socket", "gloo"):
                    print(json.dumps(run(os.path.abspath(a.build), n, kind, job.name, a.timeout)), flush=True)


if __name__ == "__main__":
    main()

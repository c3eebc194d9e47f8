#!/usr/bin/env python3
"""Where copying through the shared segment's inline slots stops paying against single-copy
reads of the peers' buffers (DISTRUN_SHM_INLINE_BYTES, default and maximum 64 KiB of a rank's
payload). Runs distrun-bench on one host for each collective, on 2 and 4 ranks, with the
default limit and with DISTRUN_SHM_INLINE_BYTES=0 (every byte a single-copy read), interleaved,
REPS times, at payloads of 1 KiB to 64 KiB per rank (all_gather's buffer is n times that), and
prints the median latency of each and single-copy / inline per point. Above 64 KiB both are the
same path. Ratios only within one run: on a loaded host the microseconds move with the load.

Usage: scripts/bench/inline_switch.py [--build DIR] [--reps N] [--iters N]"""
import argparse
import os
import statistics
import subprocess
import sys

root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLS = ["all_reduce", "all_gather", "broadcast", "reduce_scatter", "all_to_all"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(root, "build"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--iters", default="500")
    a = ap.parse_args()
    bindir = os.path.join(os.path.abspath(a.build), "bin")
    times = {}  # (n, coll, payload, mode) -> [us]
    for rep in range(a.reps):
        for n in (2, 4):
            for coll in COLLS:
                per = n if coll == "all_gather" else 1
                for mode in ("inline", "single"):
                    env = dict(os.environ, DISTRUN_TRANSPORT="shm")
                    if mode == "single":
                        env["DISTRUN_SHM_INLINE_BYTES"] = "0"
                    cmd = [os.path.join(bindir, "distrun"), "--nproc-per-node", str(n), "--",
                           os.path.join(bindir, "distrun-bench"), coll, "-b", str(1024 * per), "-e", str(65536 * per),
                           "-f", "2", "-n", a.iters, "-w", "50", "-c", "1", "-d", "float"]
                    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
                    if r.returncode != 0 or "# Wrong elements       : 0 OK" not in r.stdout:
                        sys.exit(f"inline_switch.py: {' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
                    for line in r.stdout.splitlines():
                        f = line.split()
                        if len(f) >= 13 and f[0].isdigit():
                            times.setdefault((n, coll, int(f[0]) // per, mode), []).append(float(f[5]))
            print(f"rep {rep + 1}/{a.reps}, {n} ranks: done", file=sys.stderr, flush=True)
    payloads = sorted({k[2] for k in times})
    print(f"latency in us, median of {a.reps} (out-of-place, {a.iters} iterations): inline / single-copy "
          f"(single-copy / inline); per-rank payload as the limit counts it\n")
    for n in (2, 4):
        print(f"**{n} ranks**\n")
        print("| collective | " + " | ".join(f"{p // 1024} KiB" for p in payloads) + " |")
        print("|---|" + "---:|" * len(payloads))
        for coll in COLLS:
            cells = []
            for p in payloads:
                i = statistics.median(times[(n, coll, p, "inline")])
                s = statistics.median(times[(n, coll, p, "single")])
                cells.append(f"{i:.1f} / {s:.1f} ({s / i:.2f})")
            print(f"| {coll} | " + " | ".join(cells) + " |")
        print()


if __name__ == "__main__":
    main()

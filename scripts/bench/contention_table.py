#!/usr/bin/env python3
"""Markdown table from contention.sh's rows: per rank count, collective and size, the mean time
per call (median over repetitions) of distrun and Open MPI beside busy loops and quiet, distrun's
p50/p99, distrun/MPI, and, where a --base build ran, the quiet change against it. Targets: busy,
distrun/MPI <= 2; quiet, no more than 10% slower than the base."""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    rows = defaultdict(list)
    loads = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if r["system"] == "mpi" and r["collective"] == "all_gather" and int(r["bytes"]) < 4 * r["world_size"]:
            continue  # less than one float per rank: MPI moves nothing (distrun-bench rounds up to one)
        key = (r["world_size"], r["load"], r["collective"], int(r["bytes"]), r["system"])
        rows[key].append(r)
        loads[(r["world_size"], r["load"])].append(float(r["loadavg"]))
    med = lambda key, field: statistics.median(float(r[field]) for r in rows[key]) if key in rows else None
    human = lambda b: f"{b // 1024} KiB" if b >= 1024 else f"{b} B"
    fmt = lambda v: "-" if v is None else f"{v:.3g}" if v < 1000 else f"{v:.0f}"
    has_base = any(k[4] == "distrun_base" for k in rows)
    misses = []
    for n in sorted({k[0] for k in rows}):
        span = lambda t: f"{min(loads[(n, t)]):.1f}-{max(loads[(n, t)]):.1f}" if loads.get((n, t)) else "-"
        print(f"\n**{n} ranks** (load average: busy {span('busy')}, quiet {span('quiet')}), mean us per call\n")
        head = "| collective | size | busy distrun | p50 / p99 | busy MPI | distrun/MPI | quiet distrun | quiet MPI |"
        rule = "|---|---:|---:|---:|---:|---:|---:|---:|"
        if has_base:
            head += " quiet before | quiet change |"
            rule += "---:|---:|"
        print(head)
        print(rule)
        for c in sorted({k[2] for k in rows if k[0] == n}):
            for b in sorted({k[3] for k in rows if k[0] == n and k[2] == c}):
                d, m = med((n, "busy", c, b, "distrun"), "mean_us"), med((n, "busy", c, b, "mpi"), "mean_us")
                ratio = d / m if d and m else None
                if ratio and ratio > 2:
                    misses.append(f"{n} ranks {c} {human(b)} busy: {ratio:.2f}x MPI")
                cells = [c, human(b), fmt(d),
                         f"{fmt(med((n, 'busy', c, b, 'distrun'), 'p50_us'))} / {fmt(med((n, 'busy', c, b, 'distrun'), 'p99_us'))}",
                         fmt(m), "-" if ratio is None else f"**{ratio:.2f}x**",
                         fmt(med((n, "quiet", c, b, "distrun"), "mean_us")), fmt(med((n, "quiet", c, b, "mpi"), "mean_us"))]
                if has_base:
                    q, qb = med((n, "quiet", c, b, "distrun"), "mean_us"), med((n, "quiet", c, b, "distrun_base"), "mean_us")
                    change = (q / qb - 1) * 100 if q and qb else None
                    cells += [fmt(qb), "-" if change is None else f"{change:+.0f}%"]
                print("| " + " | ".join(cells) + " |")
    print()
    print("busy target (distrun/MPI <= 2): " + ("met at every point" if not misses else "missed: " + "; ".join(misses)))


if __name__ == "__main__":
    main(sys.argv[1])

#!/usr/bin/env python3
"""Markdown latency table from latency.sh's rows: median time per (system, collective, bytes,
ranks) over the repetitions, distrun/MPI per point, and per rank count the geometric mean and the
worst ratio (targets: geomean <= 1.5, no point above 3)."""
import json
import math
import statistics
import sys
from collections import defaultdict


def main(path):
    times = defaultdict(list)
    for line in open(path):
        r = json.loads(line)
        if "time_us" not in r:  # e.g. torch's gloo has no reduce_scatter
            continue
        times[(r["system"], r["collective"], int(r["bytes"]), int(r["world_size"]))].append(float(r["time_us"]))
    med = {k: statistics.median(v) for k, v in times.items()}
    systems = [s for s in ("distrun", "mpi", "distrun_single_copy", "torch") if any(k[0] == s for k in med)]
    colls = sorted({k[1] for k in med})
    sizes = sorted({k[2] for k in med})
    worlds = sorted({k[3] for k in med})
    human = lambda b: f"{b // 1024} KiB" if b >= 1024 else f"{b} B"
    misses = 0
    for n in worlds:
        print(f"\n**{n} ranks**, latency in us ({' / '.join(systems)}), and distrun/MPI\n")
        print("| collective | " + " | ".join(human(b) for b in sizes) + " |")
        print("|---|" + "---:|" * len(sizes))
        ratios = []
        for c in colls:
            cells = []
            for b in sizes:
                vals = [med.get((s, c, b, n)) for s in systems]
                if None in vals[:2]:
                    cells.append("-")
                    continue
                ratio = vals[0] / vals[1]
                ratios.append(ratio)
                cells.append(" / ".join(f"{v:.3g}" for v in vals if v is not None) + f" (**{ratio:.2f}x**)")
            print(f"| {c} | " + " | ".join(cells) + " |")
        if ratios:
            geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            worst = max(ratios)
            ok = geo <= 1.5 and worst <= 3
            misses += not ok
            print(f"\n{n} ranks: geomean distrun/MPI {geo:.2f}x, worst {worst:.2f}x over {len(ratios)} points "
                  f"({'meets' if ok else 'misses'} the target: geomean <= 1.5, worst <= 3)")
    return misses


if __name__ == "__main__":
    main(sys.argv[1])

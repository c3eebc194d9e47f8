#!/usr/bin/python3
"""busbw against message size for distrun, torch.distributed (gloo) and Open MPI, from
compare.sh's results (JSON Lines rows with "kind": "busbw"; the median over repetitions is
plotted): one panel per collective, one colour per system, solid lines for 2 ranks and dashed
for 4. Uses Debian's python3-matplotlib (run with /usr/bin/python3).

Usage: plot.py RESULTS.jsonl OUT.png [--title TEXT]
"""
import argparse
import json
import statistics
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")  # no display needed
import matplotlib.pyplot as plt  # noqa: E402

COLLECTIVES = ["all_reduce", "all_gather", "all_to_all", "broadcast", "reduce_scatter"]
SYSTEMS = [("distrun", "distrun (single copy on one host)", "tab:blue"), ("torch", "torch.distributed (gloo)", "tab:orange"),
           ("mpi", "Open MPI (shared memory)", "tab:green")]
STYLES = {2: "-", 4: "--"}
MIB = 1024 * 1024


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("png")
    ap.add_argument("--title", default="busbw against message size (median of repetitions)")
    args = ap.parse_args()
    points = defaultdict(list)
    with open(args.results) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("kind") == "busbw" and r.get("busbw_gbps") is not None:
                points[(r["system"], r["collective"], r["world_size"], r["bytes"])].append(r["busbw_gbps"])
    worlds = sorted({k[2] for k in points})
    fig, axes = plt.subplots(1, len(COLLECTIVES), figsize=(4 * len(COLLECTIVES), 4), sharey=True)
    for ax, coll in zip(axes, COLLECTIVES):
        for system, label, colour in SYSTEMS:
            for n in worlds:
                xs = sorted(b for (s, c, w, b) in points if (s, c, w) == (system, coll, n))
                if not xs:
                    continue
                ys = [statistics.median(points[(system, coll, n, b)]) for b in xs]
                ax.plot([b / MIB for b in xs], ys, STYLES.get(n, ":"), marker="o", color=colour,
                        label="%s, %d ranks" % (label, n))
        ax.set_title(coll)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (MiB)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("busbw (GB/s)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=max(1, len(labels) // 2), fontsize="small")
    fig.suptitle(args.title)
    fig.tight_layout(rect=(0, 0.12, 1, 0.95))
    fig.savefig(args.png, dpi=100)
    print("wrote", args.png)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""The store at scale as a picture: time against clients on log-log axes, connect and barrier
for distrun's store and torch's TCPStore, from scripts/bench/control_plane.sh's JSON lines (the
median over repeated runs at one count). Uses Debian's python3-matplotlib.

Usage: control_plane_plot.py RESULTS.jsonl OUT.png
"""
import json
import statistics
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    results, out = sys.argv[1], sys.argv[2]
    times = defaultdict(lambda: defaultdict(list))
    for line in open(results):
        if line.strip():
            r = json.loads(line)
            times[(r["server"], "connect")][r["clients"]].append(r["connect_s"])
            times[(r["server"], "barrier")][r["clients"]].append(r["barrier_s"])
    fig, ax = plt.subplots(figsize=(7, 4.5))
    colours = {"distrun": "tab:blue", "torch": "tab:orange"}
    for (server, what), by_n in sorted(times.items()):
        ns = sorted(by_n)
        ax.plot(ns, [statistics.median(by_n[n]) for n in ns], marker="o", color=colours.get(server),
                linestyle="-" if what == "connect" else "--", label=f"{server} {what}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("clients (one connection each)")
    ax.set_ylabel("seconds")
    ax.set_title("Store: connect (authenticated) and one barrier, one host")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Pictures of benchmark results, as PNG. Uses Debian's python3-matplotlib (run with
/usr/bin/python3). The input decides the picture:

- a `distrun-bench -J` document of kind "bench": busbw, and p50 and p99 time per run, against
  the size, one line per collective (and placement, dtype, op);
- a `distrun-bench qualify -J` document: the pair bandwidth matrix as a heatmap, suspects marked;
- compare.sh's results (JSON Lines rows with "kind": "busbw"; the median over repetitions is
  plotted): busbw for distrun, torch.distributed (gloo) and Open MPI, one panel per
  collective, one colour per system, solid lines for 2 ranks and dashed for 4.

Usage: plot.py RESULTS OUT.png [--title TEXT]
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


def load_document(path):
    """The distrun-bench -J document in `path`, or None for JSON Lines (compare.sh's rows)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("kind") in ("bench", "qualify") else None


def where(doc):
    p = doc["provenance"]
    hosts = len(p["hosts"])
    return "%d ranks on %d host%s, %s over %s, distrun %s, %s" % (
        p["world_size"], hosts, "" if hosts == 1 else "s", p["backend"], p["transport"], p["distrun_version"],
        p["date"][:10])


def plot_bench(doc, png, title):
    lines = defaultdict(list)
    for r in doc["results"]:
        key = (r["collective"], r["placement"].replace("_", "-"), r["dtype"], r["redop"])
        lines[key].append(r)
    several_types = len({k[2:] for k in lines}) > 1
    fig, (bw, lat) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, (key, rows) in enumerate(sorted(lines.items())):
        rows.sort(key=lambda r: r["bytes"])
        label = "%s %s" % key[:2] + (" %s %s" % key[2:] if several_types else "")
        colour = "C%d" % (i % 10)
        xs = [r["bytes"] for r in rows]
        bw.plot(xs, [r["busbw_gbps"] for r in rows], marker="o", color=colour, label=label)
        lat.plot(xs, [r["p50_us"] for r in rows], marker="o", color=colour, label=label + " p50")
        lat.plot(xs, [r["p99_us"] for r in rows], linestyle="--", color=colour, label=label + " p99")
    for ax, ylabel in ((bw, "busbw (GB/s)"), (lat, "time per run (us), p50 solid, p99 dashed")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    lat.set_yscale("log")
    bw.legend(fontsize="small")
    fig.suptitle((title or "distrun-bench") + "\n" + where(doc), fontsize="medium")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def plot_qualify(doc, png, title):
    q = doc["qualify"]
    nodes = q["nodes"]
    n = len(nodes)
    matrix = [[float("nan")] * n for _ in range(n)]
    for p in q["pairs"]:
        matrix[p["a"]][p["b"]] = matrix[p["b"]][p["a"]] = p["bw_gbps"]
    names = ["%d %s\n%s" % (k["node"], k["host"], k["address"]) for k in nodes]
    fig, ax = plt.subplots(figsize=(2.2 + 1.1 * n, 1.6 + 1.0 * n))
    im = ax.imshow(matrix, cmap="viridis")
    fig.colorbar(im, ax=ax, label="pair bandwidth, each way (GB/s)")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, fontsize="small")
    ax.set_yticklabels(names, fontsize="small")
    for p in q["pairs"]:
        for a, b in ((p["a"], p["b"]), (p["b"], p["a"])):
            ax.text(b, a, "%.3g%s" % (p["bw_gbps"], "\nslow" if p["slow"] else ""), ha="center", va="center",
                    color="white" if p["slow"] else "black", fontsize="small")
    suspects = ", ".join("%s (%s)" % (s["host"], s["address"]) for s in q["suspect_nodes"]) or "none"
    ax.set_title("%s\nsuspect nodes: %s; suspect links: %d\n%s" % (
        title or "distrun-bench qualify", suspects, len(q["suspect_links"]), where(doc)), fontsize="small")
    fig.tight_layout()
    fig.savefig(png, dpi=100)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("png")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()
    doc = load_document(args.results)
    if doc is not None:
        (plot_bench if doc["kind"] == "bench" else plot_qualify)(doc, args.png, args.title)
        print("wrote", args.png)
        return
    args.title = args.title or "busbw against message size (median of repetitions)"
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

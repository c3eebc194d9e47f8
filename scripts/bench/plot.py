#!/usr/bin/python3
"""Pictures of benchmark results, as PNG. Uses Debian's python3-matplotlib (run with
/usr/bin/python3). The input decides the picture:

- a `distrun-bench -J` document of kind "bench": one panel per collective (a grid), busbw
  against the size, one colour per dtype (and op), solid out of place, dashed in place, the p50
  time too when a panel has few lines; the legend below the panels;
- a `distrun-bench qualify -J` document: the bandwidth of each direction (row sends, column
  receives) as a heatmap, slow directions framed, suspects in red;
- compare.sh's results (JSON Lines rows with "kind": "busbw"; the median over repetitions is
  plotted): busbw for distrun, torch.distributed (gloo) and Open MPI, one panel per
  collective, one colour per system, solid lines for 2 ranks and dashed for 4;
- with --between-hosts, hosts.py's rows (JSON Lines, compare.sh --hosts): the same panels for
  distrun's TCP path and torch's gloo between namespace hosts, the quiet runs only, one line
  style per hosts x ranks per host.

Usage: plot.py RESULTS OUT.png [--title TEXT] [--between-hosts]
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
HOST_SYSTEMS = [("distrun", "distrun (TCP between hosts)", "tab:blue"), ("torch", "torch.distributed (gloo)", "tab:orange"),
                ("mpi", "Open MPI (TCP between hosts)", "tab:green")]
STYLES = ["-", "--", ":", "-."]  # one per placement, in order: 2 ranks, 4 ranks on one host
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
    """One panel per collective in a grid: busbw against the size, one colour per dtype (and
    op), solid out of place and dashed in place; with few lines also the p50 time (dotted, right
    axis). The legend sits below the grid, outside every panel."""
    import math

    by_coll = defaultdict(lambda: defaultdict(list))
    for row in doc["results"]:  # nccl-tests' rows: a figures object per placement, null when not timed
        for placement in ("out_of_place", "in_place"):
            if row[placement] is not None:
                r = {"bytes": row["size"], "busbw_gbps": row[placement]["bus_bw"], "p50_us": row[placement]["p50_us"]}
                by_coll[row["collective"]][(row["type"], row["redop"], placement)].append(r)
    colls = [c for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
                         "scatter", "send_recv") if c in by_coll]
    several_ops = len({k[1] for c in colls for k in by_coll[c] if k[1] != "none"}) > 1
    kind = lambda k: (k[0], k[1] if several_ops and k[1] != "none" else "")  # what picks the colour
    kinds = sorted({kind(k) for c in colls for k in by_coll[c]})
    colour = {k: "C%d" % (i % 10) for i, k in enumerate(kinds)}
    with_times = max(len(by_coll[c]) for c in colls) <= 4
    cols = min(3, len(colls))
    rows = (len(colls) + cols - 1) // cols
    legend_rows = math.ceil((len(kinds) + 2) / 6)
    legend_in = 0.3 + 0.22 * legend_rows
    height = 3.4 * rows + legend_in + 0.8
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, height), squeeze=False)
    for ax, coll in zip(axes.flat, colls):
        times = ax.twinx() if with_times else None
        for key, recs in sorted(by_coll[coll].items()):
            recs.sort(key=lambda r: r["bytes"])
            xs = [r["bytes"] for r in recs]
            style = "--" if key[2] == "in_place" else "-"
            ax.plot(xs, [r["busbw_gbps"] for r in recs], style, marker="o", markersize=3, color=colour[kind(key)])
            if times:
                times.plot(xs, [r["p50_us"] for r in recs], linestyle=":", color=colour[kind(key)])
        ax.set_title(coll, fontsize="medium")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size (bytes)")
        ax.set_ylabel("busbw (GB/s)")
        if times:
            times.set_yscale("log")
            times.set_ylabel("p50 time (us), dotted")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(colls):]:
        ax.axis("off")
    from matplotlib.lines import Line2D
    handles = {" ".join(k).strip(): Line2D([], [], color=colour[k], marker="o", markersize=3) for k in kinds}
    handles["out of place"] = Line2D([], [], color="black", linestyle="-")
    handles["in place"] = Line2D([], [], color="black", linestyle="--")
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center", ncol=6, fontsize="small",
               frameon=False)
    fig.suptitle((title or "distrun-bench") + "\n" + where(doc), fontsize="medium")
    fig.tight_layout(rect=(0, legend_in / height, 1, 1))
    fig.savefig(png, dpi=100)
    return fig


def plot_qualify(doc, png, title):
    """The direction matrix (row sends, column receives) as a heatmap on a log scale, slow
    directions framed in red with their reasons, suspect nodes' names in red."""
    import math
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    q = doc["qualify"]
    nodes = q["nodes"]
    n = len(nodes)
    matrix = [[float("nan")] * n for _ in range(n)]
    for d in q["directions"]:
        matrix[d["src"]][d["dst"]] = d["bw_gbps"]
    suspect = {s["node"] for s in q["suspect_nodes"]}
    names = ["%d %s\n%s%s" % (k["node"], k["host"], k["address"], "\nSUSPECT" if k["node"] in suspect else "")
             for k in nodes]
    size = min(0.9 * n, 14)
    fig, ax = plt.subplots(figsize=(3.5 + size, 2.5 + size))
    values = [v for row in matrix for v in row if not math.isnan(v) and v > 0]
    im = ax.imshow(matrix, cmap="viridis", norm=LogNorm(vmin=min(values), vmax=max(values)) if values else None)
    fig.colorbar(im, ax=ax, label="bandwidth of the direction, median exchange (GB/s)")
    ax.set_xticks(range(n))
    ax.set_yticks(range(n))
    ax.set_xticklabels(names, fontsize="x-small" if n > 8 else "small")
    ax.set_yticklabels(names, fontsize="x-small" if n > 8 else "small")
    for i in suspect:
        ax.get_xticklabels()[i].set_color("red")
        ax.get_yticklabels()[i].set_color("red")
    ax.set_xlabel("receives")
    ax.set_ylabel("sends")
    for d in q["directions"]:
        slow = ",".join(d["slow"])
        if n <= 12:
            ax.text(d["dst"], d["src"], "%.3g%s" % (d["bw_gbps"], "\n" + slow if slow else ""), ha="center",
                    va="center", color="white" if slow else "black", fontsize="x-small")
        if slow:
            ax.add_patch(Rectangle((d["dst"] - 0.5, d["src"] - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2))
    r = q["reference"]
    ax.set_title("%s\nsuspect nodes: %s; suspect links: %d; exclude: %s\nreference %.3g GB/s (%s)\n%s" % (
        title or "distrun-bench qualify", ", ".join("%s (%s)" % (s["host"], s["address"]) for s in q["suspect_nodes"])
        or "none", len(q["suspect_links"]), q["exclude"] or "none", r["bw_gbps"], r["source"], where(doc)),
        fontsize="small")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    return fig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("png")
    ap.add_argument("--title", default=None)
    ap.add_argument("--between-hosts", action="store_true", help="hosts.py's rows (compare.sh --hosts)")
    args = ap.parse_args()
    doc = load_document(args.results)
    if doc is not None:
        fig = (plot_bench if doc["kind"] == "bench" else plot_qualify)(doc, args.png, args.title)
        print("wrote", args.png)
        return fig
    args.title = args.title or "busbw against message size (median of repetitions)"
    points = defaultdict(list)
    with open(args.results) as f:
        for line in f:
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            if r.get("kind") != "busbw" or r.get("busbw_gbps") is None or r.get("busy"):
                continue
            where = ("%d hosts x %d" % (r["hosts"], r["world_size"] // r["hosts"]) if args.between_hosts
                     else "%d ranks" % r["world_size"])
            points[(r["system"], r["collective"], where, r["bytes"])].append(r["busbw_gbps"])
    wheres = sorted({k[2] for k in points})
    fig, axes = plt.subplots(1, len(COLLECTIVES), figsize=(4 * len(COLLECTIVES), 4), sharey=True)
    for ax, coll in zip(axes, COLLECTIVES):
        for system, label, colour in HOST_SYSTEMS if args.between_hosts else SYSTEMS:
            for i, where in enumerate(wheres):
                xs = sorted(b for (s, c, w, b) in points if (s, c, w) == (system, coll, where))
                if not xs:
                    continue
                ys = [statistics.median(points[(system, coll, where, b)]) for b in xs]
                ax.plot([b / MIB for b in xs], ys, STYLES[i % len(STYLES)], marker="o", color=colour,
                        label="%s, %s" % (label, where))
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

#!/usr/bin/python3
"""Turns compare.sh's raw measurements (JSON Lines, one object per measurement, each with a
"kind": launch, busbw or rss, and a "rep") into the three comparison tables, as Markdown, with
the median over repetitions and each target's verdict.

Usage: summarize.py RESULTS.jsonl [--markdown OUT.md] [--docs docs/performance.md] [--strict]
  --markdown: also write the tables to OUT.md
  --docs:     replace the text between <!-- compare:begin --> and <!-- compare:end --> in that file
  --strict:   exit 3 when a target is missed
"""
import argparse
import json
import statistics
import sys
from collections import defaultdict

COLLECTIVES = ["all_reduce", "all_gather", "all_to_all", "broadcast", "reduce_scatter"]
MIB = 1024 * 1024
LAUNCH_TARGET = 20.0  # torchrun / distrun launch-to-exit
RSS_TARGET = 5.0  # torchrun / distrun largest process


def load(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.startswith("{"):
                rows.append(json.loads(line))
    return rows


def median(values):
    return statistics.median(values) if values else None


def size_name(nbytes):
    return f"{nbytes // MIB} MiB" if nbytes % MIB == 0 else f"{nbytes} B"


def launch_table(rows, out):
    by = defaultdict(list)
    for r in rows:
        by[r["system"]].append(r["seconds"])
    d, t = median(by.get("distrun", [])), median(by.get("torchrun", []))
    out.append("### 1. Launch to exit, 4-rank trivial all_reduce (median of %d)" % len(by.get("distrun", [])))
    out.append("")
    out.append("| system | seconds | runs |")
    out.append("|---|---:|---|")
    for name, v in (("distrun", d), ("torchrun", t)):
        runs = ", ".join("%.3f" % x for x in by.get(name, []))
        out.append("| %s | %s | %s |" % (name, "%.3f" % v if v is not None else "n/a", runs))
    ok = d is not None and t is not None and t / d >= LAUNCH_TARGET
    ratio = "%.1fx" % (t / d) if d and t else "n/a"
    out.append("")
    out.append("torchrun / distrun: **%s** (target >= %gx): %s" % (ratio, LAUNCH_TARGET, "met" if ok else "NOT MET"))
    out.append("")
    return ok


def busbw_table(rows, out):
    by = defaultdict(list)
    for r in rows:
        if r.get("busbw_gbps") is not None:
            by[(r["system"], r["collective"], r["bytes"], r["world_size"])].append(r["busbw_gbps"])
    worlds = sorted({r["world_size"] for r in rows})
    sizes = sorted({r["bytes"] for r in rows})
    out.append("### 2. busbw (GB/s, median of repetitions; GB = 1e9 B; size = the whole buffer, as nccl-tests)")
    out.append("")
    out.append("| ranks | collective | size | distrun | torch (gloo) | Open MPI | distrun / torch | distrun / MPI |")
    out.append("|---:|---|---:|---:|---:|---:|---:|---:|")
    missed, ratios_mpi = [], []
    for n in worlds:
        for c in COLLECTIVES:
            for s in sizes:
                d = median(by.get(("distrun", c, s, n), []))
                t = median(by.get(("torch", c, s, n), []))
                m = median(by.get(("mpi", c, s, n), []))
                if d is None and t is None and m is None:
                    continue
                fmt = lambda v: "%.2f" % v if v is not None else "n/a"
                rt = "%.2f" % (d / t) if d and t else "n/a"
                rm = "%.2f" % (d / m) if d and m else "n/a"
                if d and m:
                    ratios_mpi.append(d / m)
                if t is not None and (d is None or d < t):
                    missed.append("%s %s on %d" % (c, size_name(s), n))
                    rt += " **<1**"
                out.append("| %d | %s | %s | %s | %s | %s | %s | %s |" % (n, c, size_name(s), fmt(d), fmt(t), fmt(m), rt, rm))
    out.append("")
    if missed:
        out.append("distrun >= torch at every point: NOT MET at " + ", ".join(missed))
    else:
        out.append("distrun >= torch at every point (n/a: torch's gloo has no reduce_scatter): met")
    if ratios_mpi:
        out.append("")
        out.append("distrun / Open MPI: median %.2f, range %.2f .. %.2f" %
                   (statistics.median(ratios_mpi), min(ratios_mpi), max(ratios_mpi)))
    out.append("")
    return not missed


def rss_table(rows, out):
    by = defaultdict(list)
    who = {}
    for r in rows:
        by[r["system"]].append(r["largest_kb"])
        who[r["system"]] = r.get("largest_cmd", "?")
    out.append("### 3. Peak RSS of the largest process, 16 MiB all_reduce on 4 ranks (median of %d)" %
               len(by.get("distrun", [])))
    out.append("")
    out.append("| job | largest process (MB) | / torchrun | which process |")
    out.append("|---|---:|---:|---|")
    t = median(by.get("torchrun", []))
    jobs = (("distrun", "distrun, bench step (rss_bench.yaml; torch_bench.py's twin)"),
            ("distrun_step", "distrun, checked scenario step (rss_step.yaml)"),
            ("torchrun", "torchrun + torch_bench.py"))
    verdicts = {}
    for name, label in jobs:
        v = median(by.get(name, []))
        ratio = v / t if v and t else None
        verdicts[name] = ratio is not None and ratio <= 1 / RSS_TARGET
        out.append("| %s | %s | %s | `%s` |" % (label, "%.1f" % (v / 1024) if v else "n/a",
                                              "%.2f" % ratio if ratio else "n/a", who.get(name, "?")[:60]))
    out.append("")
    out.append("distrun / torchrun (target <= 1/%g = %.2f): bench step %s; scenario step %s" %
               (RSS_TARGET, 1 / RSS_TARGET, "met" if verdicts["distrun"] else "NOT MET",
                "met" if verdicts["distrun_step"] else "NOT MET"))
    out.append("")
    return verdicts["distrun"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--markdown")
    ap.add_argument("--docs")
    ap.add_argument("--strict", action="store_true")
    args = ap.parse_args()
    rows = load(args.results)
    kinds = defaultdict(list)
    for r in rows:
        kinds[r.get("kind")].append(r)
    out = []
    verdicts = {
        "launch": launch_table(kinds["launch"], out),
        "busbw": busbw_table(kinds["busbw"], out),
        "rss": rss_table(kinds["rss"], out),
    }
    met = sum(verdicts.values())
    out.append("Targets met: %d of 3 (%s)" % (met, ", ".join("%s %s" % (k, "met" if v else "NOT MET")
                                                              for k, v in verdicts.items())))
    text = "\n".join(out) + "\n"
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.docs:
        with open(args.docs) as f:
            doc = f.read()
        begin, end = "<!-- compare:begin -->", "<!-- compare:end -->"
        if begin not in doc or end not in doc:
            sys.exit("summarize.py: %s has no %s ... %s section" % (args.docs, begin, end))
        head, rest = doc.split(begin, 1)
        tail = rest.split(end, 1)[1]
        with open(args.docs, "w") as f:
            f.write(head + begin + "\n" + text + end + tail)
    if args.strict and met < 3:
        sys.exit(3)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Markdown tables of hosts.py's rows (JSON Lines; compare.sh --hosts writes them to
OUT/hosts.jsonl): one summary row per hosts x ranks x quiet/busy, then each placement's latency
and busbw tables. Every figure is the median over repetitions of one system's p50 (latency) or
busbw; a ratio is of two such medians. Bold marks a ratio that meets its target: at most 0.5x
torch's time, at most 3x the kernel's round trip at 8 B, at least 1.2x torch's busbw, at least
0.8 of raw TCP, counted against each of hosts.py's two raw-TCP anchors: one pair (two hosts'
ends with the cores to themselves, each way) and the raw ring (every rank at once, each sending
to the next and receiving from the previous: the link as the whole placement loads it).

Usage: hosts_table.py ROWS.jsonl [--docs FILE]
  --docs FILE  replace what lies between FILE's `<!-- hosts:begin -->` and `<!-- hosts:end -->`
               with the tables (the rest of FILE untouched)
"""
import argparse
import json
import re
import statistics
import sys

LATENCY_COLLS = ["all_reduce", "all_gather", "broadcast", "send_recv"]
BUSBW_COLLS = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"]
FAST, ROUND_TRIPS, FASTER_BW, OF_LINK = 0.5, 3.0, 1.2, 0.8  # the targets
BEGIN, END = "<!-- hosts:begin -->", "<!-- hosts:end -->"


def size_name(b):
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if b >= unit and b % unit == 0:
            return f"{b // unit} {name}"
    return f"{b} B"


def placement(r):
    """(hosts, ranks per host, busy loops) of a row."""
    return r["hosts"], r.get("per_host", r["world_size"] // r["hosts"]), r["busy"]


def placement_name(p):
    return f"{p[0]} x {p[1]}, " + ("quiet" if not p[2] else f"{p[2]} busy loops")


class Placement:
    """One placement's rows, reduced to medians over repetitions."""

    def __init__(self, rows):
        med = statistics.median
        self.run = next((r for r in rows if r["kind"] == "run"), {})
        links = [r for r in rows if r["kind"] == "link"]
        self.rtt = med([r["rtt_us"] for r in links]) if links else None
        self.tcp = med([r["tcp_gbps"] for r in links]) if links else None
        self.rtts = [r["rtt_us"] for r in links]
        self.tcps = [r["tcp_gbps"] for r in links]
        # Link rows need not have it (rows made by hand): the ring then reads n/a.
        self.rings = [r["ring_gbps"] for r in links if r.get("ring_gbps") is not None]
        self.ring = med(self.rings) if self.rings else None
        got = {}
        for r in rows:
            if r["kind"] in ("latency", "busbw"):
                key = "p50_us" if r["kind"] == "latency" else "busbw_gbps"
                if r.get(key) is not None:
                    got.setdefault((r["kind"], r["system"], r["collective"], r["bytes"]), []).append(r[key])
        self.value = {k: med(v) for k, v in got.items()}
        self.sizes = {kind: sorted({k[3] for k in self.value if k[0] == kind}) for kind in ("latency", "busbw")}

    def get(self, kind, system, coll, b):
        return self.value.get((kind, system, coll, b))

    def ratio(self, kind, coll, b, over="torch", system="distrun"):
        d, t = self.get(kind, system, coll, b), self.get(kind, over, coll, b)
        return d / t if d is not None and t else None

    def counts(self):
        """(latency points at most FAST of torch's time: collectives (met, of), send_recv (met, of);
        busbw points at least FASTER_BW torch's (met, of); at least OF_LINK of raw TCP, one pair
        (met, of); at least OF_LINK of the raw ring (met, of))."""
        def count(values, good):
            values = [v for v in values if v is not None]
            return sum(map(good, values)), len(values)
        lat = [(c, b) for c in LATENCY_COLLS for b in self.sizes["latency"]]
        bw = [(c, b) for c in BUSBW_COLLS for b in self.sizes["busbw"]]
        return (count([self.ratio("latency", c, b) for c, b in lat if c != "send_recv"], lambda v: v <= FAST),
                count([self.ratio("latency", c, b) for c, b in lat if c == "send_recv"], lambda v: v <= FAST),
                count([self.ratio("busbw", c, b) for c, b in bw], lambda v: v >= FASTER_BW),
                count([self.of_raw(c, b, self.tcp) for c, b in bw], lambda v: v >= OF_LINK),
                count([self.of_raw(c, b, self.ring) for c, b in bw], lambda v: v >= OF_LINK))

    def of_raw(self, coll, b, raw):
        """distrun's busbw over a raw-TCP anchor's GB/s (the same unit: hosts.py's ring_rate)."""
        d = self.get("busbw", "distrun", coll, b)
        return d / raw if d is not None and raw else None


def fmt_ratio(v, good):
    if v is None:
        return "n/a"
    return f"**{v:.2f}x**" if good(v) else f"{v:.2f}x"


def fmt(v, spec):
    return "n/a" if v is None else spec % v


def load_text(run):
    before, after = run.get("load_before"), run.get("load_after")
    return f"{before[0]}, {after[0]}" if before and after else "n/a"


def summary(places):
    out = ["| hosts x ranks | load (before, after) | round trip us | raw TCP GB/s: one pair, ring | 8 B all_reduce, "
           "all_gather, broadcast, send_recv / round trip | 8 B..64 KiB at most 0.5x torch's time: collectives, "
           "send_recv | 1..64 MiB busbw at least 1.2x torch's | at least 0.8 of raw TCP: one pair, ring |",
           "|---|---|---:|---:|---|---|---|---|"]
    for p, pl in places.items():
        eight = []
        for c in LATENCY_COLLS:
            d = pl.get("latency", "distrun", c, 8)
            eight.append(fmt_ratio(d / pl.rtt if d is not None and pl.rtt else None, lambda v: v <= ROUND_TRIPS))
        (cm, cn), (sm, sn), (tm, tn), (lm, ln), (rm, rn) = pl.counts()
        ring = f"{rm} of {rn}" if pl.ring else "n/a"
        out.append(f"| {placement_name(p)} | {load_text(pl.run)} | {fmt(pl.rtt, '%.1f')} | {fmt(pl.tcp, '%.3f')}, "
                   f"{fmt(pl.ring, '%.3f')} | {', '.join(eight)} | {cm} of {cn}, {sm} of {sn} | {tm} of {tn} | "
                   f"{lm} of {ln}, {ring} |")
    return out


def detail(p, pl):
    run = pl.run
    head = (f"**{placement_name(p)}** (distrun against torch {run.get('torch') or '?'} gloo"
            f"{' and Open MPI' if any(k[1] == 'mpi' for k in pl.value) else ''}; medians of "
            f"{run.get('reps', '?')} interleaved repetitions; load average {' '.join(run.get('load_before', []))} "
            f"before, {' '.join(run.get('load_after', []))} after, on {run.get('cores', '?')} cores; round trip "
            f"{', '.join('%.1f' % x for x in pl.rtts)} us, raw TCP each way {', '.join('%.3f' % x for x in pl.tcps)} "
            f"GB/s (one pair), raw ring {', '.join('%.3f' % x for x in pl.rings) or 'n/a'} GB/s a rank, by "
            f"repetition{'; baseline: ' + run['baseline'] if run.get('baseline') else ''})")
    out = [head, ""]
    if run.get("mpi"):  # rows of a run that left Open MPI out say why
        out += [f"Open MPI not measured here: {run['mpi']}.", ""]
    for kind, colls, unit, spec, limit, name, fast, near in (
            ("latency", LATENCY_COLLS, "p50 us | torch | Open MPI (mean)", "%.1f", pl.rtt, "round trip",
             lambda v: v <= FAST, lambda v: v <= ROUND_TRIPS),
            ("busbw", BUSBW_COLLS, "busbw GB/s | torch | Open MPI", "%.3f", pl.tcp, "raw TCP (one pair)",
             lambda v: v >= FASTER_BW, lambda v: v >= OF_LINK)):
        if not pl.sizes[kind]:
            continue
        base = any(k[1] == "baseline" for k in pl.value if k[0] == kind)
        ring = kind == "busbw"  # a column against the raw ring as well
        out.append(f"| collective | size | distrun {unit} | distrun / torch | distrun / Open MPI | distrun / {name} |"
                   + (" distrun / raw ring |" if ring else "") + (" this build / baseline |" if base else ""))
        out.append("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if ring else "") + ("---:|" if base else ""))
        for c in colls:
            for b in pl.sizes[kind]:
                d = pl.get(kind, "distrun", c, b)
                if d is None and pl.get(kind, "torch", c, b) is None:
                    continue
                # Only the round trip of an 8-byte message has a target; other sizes are shown plain.
                lim = d / limit if d is not None and limit else None
                mpi = pl.ratio(kind, c, b, over="mpi")
                cells = [c, size_name(b), fmt(d, spec), fmt(pl.get(kind, "torch", c, b), spec),
                         fmt(pl.get(kind, "mpi", c, b), spec), fmt_ratio(pl.ratio(kind, c, b), fast),
                         fmt(mpi, "%.2fx"), fmt_ratio(lim, near if kind == "busbw" or b == 8 else lambda v: False)]
                if ring:
                    cells.append(fmt_ratio(pl.of_raw(c, b, pl.ring), near))
                if base:
                    cells.append(fmt(pl.ratio(kind, c, b, over="baseline"), "%.2fx"))
                out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out


def tables(rows):
    by = {}
    for r in rows:
        by.setdefault(placement(r), []).append(r)
    places = {p: Placement(rows_of) for p, rows_of in by.items()}  # in the order they ran
    out = summary(places) + [""]
    for p, pl in places.items():
        out += detail(p, pl)
    return "\n".join(out).rstrip() + "\n"


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.startswith("{")]


def replace_block(path, text):
    with open(path) as f:
        doc = f.read()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(doc):
        sys.exit(f"hosts_table.py: {path} has no {BEGIN} ... {END} block")
    with open(path, "w") as f:
        f.write(pattern.sub(lambda _: f"{BEGIN}\n{text}{END}", doc, count=1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows")
    ap.add_argument("--docs", metavar="FILE")
    a = ap.parse_args()
    text = tables(load(a.rows))
    sys.stdout.write(text)
    if a.docs:
        replace_block(a.docs, text)


if __name__ == "__main__":
    main()

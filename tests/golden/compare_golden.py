#!/usr/bin/env python3
"""Compares a distrun results file (JSON Lines, --results) with a golden file.

Golden records are {"step": N, "rank": R, "values": <nested list>} or {..., "object": <JSON>},
with an optional "atol" (absolute tolerance; default 1e-6 relative, since golden values are
decimal transcriptions of float32 results) and an optional "note" (ignored here).
Every golden record must have a result record with the same step and rank and an equal value;
result records without a golden counterpart are not checked (the seeds print only some results).

Usage: compare_golden.py RESULTS.jsonl GOLDEN.jsonl   -> exit 0 when all match, 1 otherwise.
"""
import json
import math
import sys

DEFAULT_RTOL = 1e-6


def load_jsonl(path):
    """Returns the records of a JSON Lines file, skipping blank lines."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def numbers_close(got, want, atol):
    """True when the number `got` equals `want` within atol (or a small relative tolerance)."""
    if isinstance(got, bool) or isinstance(want, bool):
        return got == want
    if not isinstance(got, (int, float)) or not isinstance(want, (int, float)):
        return False
    if math.isnan(want):
        return isinstance(got, float) and math.isnan(got)
    tol = atol if atol is not None else DEFAULT_RTOL * max(1.0, abs(want))
    return abs(got - want) <= tol


def values_match(got, want, atol, path="values"):
    """Compares nested lists elementwise; returns None when equal, else a description of the first difference."""
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: expected a list of {len(want)}, got {json.dumps(got)[:80]}"
        for k, (g, w) in enumerate(zip(got, want)):
            diff = values_match(g, w, atol, f"{path}[{k}]")
            if diff:
                return diff
        return None
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        return None if numbers_close(got, want, atol) else f"{path}: expected {want}, got {got}"
    return None if got == want else f"{path}: expected {json.dumps(want)}, got {json.dumps(got)}"


def objects_match(got, want, atol, path="object"):
    """Compares JSON values: dicts by key, lists elementwise, numbers with tolerance."""
    if isinstance(want, dict):
        if not isinstance(got, dict) or set(got) != set(want):
            return f"{path}: expected keys {sorted(want)}, got {json.dumps(got)[:80]}"
        for key in want:
            diff = objects_match(got[key], want[key], atol, f"{path}.{key}")
            if diff:
                return diff
        return None
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"{path}: expected a list of {len(want)}, got {json.dumps(got)[:80]}"
        for k, (g, w) in enumerate(zip(got, want)):
            diff = objects_match(g, w, atol, f"{path}[{k}]")
            if diff:
                return diff
        return None
    return values_match(got, want, atol, path)


def compare(results, golden):
    """Returns a list of problems (empty when every golden record is matched)."""
    by_key = {(r.get("step"), r.get("rank")): r for r in results}
    problems = []
    for g in golden:
        key = (g["step"], g["rank"])
        r = by_key.get(key)
        where = f"step {g['step']} rank {g['rank']}"
        if r is None:
            problems.append(f"{where}: no result record")
            continue
        atol = g.get("atol")
        if "values" in g:
            diff = values_match(r.get("values"), g["values"], atol) if "values" in r else "no values in result"
        else:
            diff = objects_match(r.get("object"), g["object"], atol) if "object" in r else "no object in result"
        if diff:
            problems.append(f"{where}: {diff}")
        if r.get("wrong", 0):
            problems.append(f"{where}: the runner's own check counted {r['wrong']} wrong")
    return problems


def main(argv):
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        results = load_jsonl(argv[1])
    except OSError as e:
        print(f"{argv[1]}: cannot read results: {e.strerror}")
        return 1
    problems = compare(results, load_jsonl(argv[2]))
    for p in problems:
        print(f"{argv[2]}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

#!/usr/bin/python3
"""How long `distrun-bench qualify` takes on N network-namespace hosts (the test's setup:
tests/bench/qualify_netns_test.py), healthy, at the default settings but -b 1M. Prints one
JSON line per run: hosts, rounds, directions, wall seconds, verdict. Needs root, ip, tc.

Usage: DISTRUN=build/bin/distrun scripts/bench/qualify_times.py [HOSTS...] [--runs R]
"""
import argparse
import importlib
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "bench"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("hosts", nargs="*", type=int, default=[4, 8, 16])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    for n in args.hosts:
        os.environ["DISTRUN_QUALIFY_HOSTS"] = str(n)
        t = importlib.reload(importlib.import_module("qualify_netns_test"))
        d = tempfile.mkdtemp(prefix="distrun-qualify-times-")
        try:
            t.setup()
            for _ in range(args.runs):
                t0 = time.monotonic()
                codes, out, doc, err = t.qualify(d, "times")
                wall = time.monotonic() - t0
                q = doc["qualify"] if doc else {}
                print(json.dumps({"hosts": n, "rounds": q.get("config", {}).get("rounds"),
                                  "bisect_rounds": q.get("config", {}).get("bisect_rounds"),
                                  "directions": len(q.get("directions", [])), "wall_s": round(wall, 2),
                                  "exit": codes[0], "suspects": len(q.get("suspect_nodes", []))}), flush=True)
        finally:
            t.teardown()
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()

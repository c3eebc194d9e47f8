#!/usr/bin/python3
"""Runs a scenario with --results through run_ranks.py, then compares the results with a
golden file using tests/golden/compare_golden.py. Exit 0 only when both succeed."""
import argparse
import os
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    for k in ("--run-ranks", "--worker", "--scenario", "--golden", "--compare"):
        ap.add_argument(k, required=True)
    ap.add_argument("--nproc", type=int, required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        results = os.path.join(d, "results.jsonl")
        rc = subprocess.call([sys.executable, a.run_ranks, "--nproc", str(a.nproc), "--timeout", "150", "--",
                              a.worker, a.scenario, "--results", results])
        if rc != 0:
            print(f"golden_run: the scenario failed (exit {rc})", file=sys.stderr)
            return 1
        return subprocess.call([sys.executable, a.compare, results, a.golden])


if __name__ == "__main__":
    sys.exit(main())

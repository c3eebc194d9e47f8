#!/usr/bin/python3
"""What checking a scenario costs as the world grows (issue 13's figures), for one build:

  1. `distrun --check` of a 1 MiB all_reduce + reduce_scatter + all_to_all at N ranks
     (default 4096): wall time and peak RSS of the launcher's validation.
     Target: <= 2 s and <= 200 MB at 4096 ranks.
  2. A checked 4 MiB all_reduce run at M ranks (default 32) on this host: the largest peak RSS
     of one distrun-worker (peak_rss.py reads every worker's VmHWM). Target: <= 64 MB.

Usage: check_cost.py [--build DIR] [--ranks N] [--worker-ranks M] [--label TEXT]
Prints one JSON object: {"label", "build", "check": {"ranks", "seconds", "cpu_seconds", "peak_mb", "rc"},
"worker": {"ranks", "largest_worker_mb", "rc"}}. Compare two builds by running it on each
(e.g. a checkout of main and this branch): the scenario files are written here, so both
builds read the same input.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def check_scenario(ranks):
    # 1 MiB of float32 per rank: [ranks, 262144 / ranks] splits evenly for reduce_scatter and all_to_all.
    cols = max(1, 262144 // ranks)
    return f"""name: check_cost_{ranks}
world_size: {ranks}
tensors:
  x: {{shape: [world_size, {cols}], fill: "rank + i + j"}}
steps:
  - {{op: all_reduce, input: x, output: a, print: false}}
  - {{op: reduce_scatter, input: x, output: r, print: false}}
  - {{op: all_to_all, input: x, output: t, print: false}}
"""


WORKER_SCENARIO = """name: check_cost_worker
timeout: 120
tensors:
  x: {shape: [1048576], fill: "rank + 1"}
steps:
  - {op: all_reduce, input: x, reduce: sum, print: false}
"""


def run_check(distrun, path, ranks):
    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    before = r0.ru_maxrss
    p = subprocess.run([distrun, "--check", "--nproc-per-node", str(ranks), path], capture_output=True, text=True)
    seconds = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak_kb = r1.ru_maxrss
    # CPU time as well as wall time: on a loaded host the wall clock mostly measures the others.
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode != 0:
        print(p.stderr[-2000:], file=sys.stderr)
    # ru_maxrss of children is the largest child so far: this is the first child, so it is ours
    # unless an earlier one was larger (none ran before).
    return {"ranks": ranks, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_mb": round(max(peak_kb, before) / 1024, 1), "rc": p.returncode}


def run_worker(distrun, path, ranks):
    p = subprocess.run([sys.executable, os.path.join(HERE, "peak_rss.py"), "worker", distrun, "--nproc-per-node",
                        str(ranks), path], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        print(p.stderr[-2000:], file=sys.stderr)
        return {"ranks": ranks, "largest_worker_mb": None, "rc": p.returncode}
    report = json.loads(p.stdout.strip().splitlines()[-1])
    workers = [q["hwm_kb"] for q in report["processes"] if "distrun-worker" in q["cmd"]]
    return {"ranks": ranks, "largest_worker_mb": round(max(workers) / 1024, 1) if workers else None,
            "workers_seen": len(workers), "rc": report["rc"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--worker-ranks", type=int, default=32)
    ap.add_argument("--label", default="")
    ap.add_argument("--skip-worker", action="store_true")
    a = ap.parse_args()
    distrun = os.path.join(a.build, "bin", "distrun")
    out = {"label": a.label, "build": os.path.abspath(a.build)}
    with tempfile.TemporaryDirectory() as d:
        check_path = os.path.join(d, f"check_cost_{a.ranks}.yaml")
        with open(check_path, "w") as f:
            f.write(check_scenario(a.ranks))
        worker_path = os.path.join(d, "check_cost_worker.yaml")
        with open(worker_path, "w") as f:
            f.write(WORKER_SCENARIO)
        out["check"] = run_check(distrun, check_path, a.ranks)
        if not a.skip_worker:
            out["worker"] = run_worker(distrun, worker_path, a.worker_ranks)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs seed scenarios with distrun-worker and compares their results with the golden files.

For each configs/seeds/X.yaml (or the files named on the command line) it starts world_size
worker processes on 127.0.0.1 with torchrun's environment and --results, waits for them (with a
timeout; stragglers are killed), then checks tests/golden/seeds/X.jsonl with compare_golden.py.

Usage: check_seeds.py --worker PATH/distrun-worker [--repo DIR] [--timeout SEC] [-v] [SCENARIO.yaml ...]
Exit status: 0 when every scenario ran and matched, 1 otherwise.
"""
import argparse
import glob
import os
import socket
import subprocess
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_golden import compare, load_jsonl  # noqa: E402


def free_port():
    """A TCP port that was free a moment ago (the worker's store binds it next)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, scenario, world_size, results, timeout, extra=()):
    """Starts world_size ranks of worker on scenario; returns (exit codes, combined output)."""
    port = str(free_port())
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                   OMP_NUM_THREADS="1")
        args = [worker, scenario, "--results", results, *extra]
        procs.append(subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    codes, output = [], []
    for rank, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.kill()
            out, _ = p.communicate()
            out += f"\n[rank {rank} killed after {timeout}s]"
        codes.append(p.returncode)
        output.append(f"--- rank {rank} (exit {p.returncode}) ---\n{out}")
    return codes, "\n".join(output)


def check_one(worker, path, golden_dir, timeout, verbose, extra=()):
    """Runs one scenario and compares it; returns a list of problems."""
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        world_size = int(yaml.safe_load(f).get("world_size", 1))
    golden = os.path.join(golden_dir, name + ".jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.jsonl")
        codes, output = run_ranks(worker, path, world_size, results, timeout, extra)
        if verbose:
            print(output)
        problems = [f"rank {r} exited {c}" for r, c in enumerate(codes) if c != 0]
        if problems and not verbose:
            print(output[-4000:])
        if not os.path.exists(results):
            return problems + ["no results file written"]
        records = load_jsonl(results)
        # The runner checks every step against its own reference; any wrong element is a failure
        # even where the seed shows no value to compare with.
        problems += [f"step {r.get('step')} rank {r.get('rank')}: the runner counted {r['wrong']} wrong"
                     for r in records if r.get("wrong")]
        return problems + compare(records, load_jsonl(golden))


def main():
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--worker", required=True)
    parser.add_argument("--repo", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("-v", "--verbose", action="store_true")
    parser.add_argument("--device", choices=["cpu", "cuda"], help="run every seed on this device (--device of the worker)")
    parser.add_argument("--backend", choices=["gloo", "nccl", "auto"],
                        help="run every seed on this backend (--backend of the worker; gloo may share a GPU)")
    parser.add_argument("--max-world", type=int, help="skip seeds that need more ranks (e.g. the GPUs of this host)")
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args()
    scenarios = args.scenarios or sorted(glob.glob(os.path.join(args.repo, "configs", "seeds", "*.yaml")))
    golden_dir = os.path.join(args.repo, "tests", "golden", "seeds")
    failed = skipped = 0
    extra = (["--device", args.device] if args.device else []) + (["--backend", args.backend] if args.backend else [])
    for path in scenarios:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        needs = int(yaml.safe_load(text).get("world_size", 1))
        # NCCL has no band/bor/bxor (docs/gpu.md): those seeds stay on the CPU.
        on_nccl = args.backend == "nccl" or (args.device == "cuda" and args.backend != "gloo")
        if (args.max_world is not None and needs > args.max_world) or (
                on_nccl and any(op in text for op in ("band", "bor", "bxor"))):
            print(f"skip {os.path.basename(path)} (needs {needs} ranks on {args.device or 'cpu'})")
            skipped += 1
            continue
        problems = check_one(args.worker, path, golden_dir, args.timeout, args.verbose, extra)
        status = "ok" if not problems else "FAIL"
        print(f"{status:4} {os.path.basename(path)}")
        for p in problems:
            print(f"     {p}")
        failed += bool(problems)
    ran = len(scenarios) - skipped
    print(f"{ran - failed}/{ran} seed scenarios match their golden values ({skipped} skipped)")
    if ran == 0:
        print("SKIP: no seed scenario fits this host", file=sys.stderr)
        return 77
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Differential test against torch.distributed: generates random scenarios (fixed seeds,
world sizes 2 to 4, every tensor collective, rows and columns, several dtypes and reduce ops;
and int16 and bool through send_recv, the one op torch 1.13's gloo takes them in: its every
collective of them raises "Invalid scalar type"), runs each with distrun (`distrun --results`) and with torch (`distrun -- python3
torch_oracle.py`), and requires the same values on every rank for every step.

Usage: run_oracle.py DISTRUN_BINARY [--seeds 3] [--narrow-seeds 2] [--steps 14]
Exit 0 when all agree, 1 on any difference, 77 (skip) when torch is not installed.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"


def generate(seed, steps, narrow=False):
    """narrow: an int16 or bool scenario of send_recv steps (what torch's gloo carries of them)."""
    rnd = random.Random(seed)
    n = rnd.choice([2, 3, 4])
    dtype = rnd.choice(["int16", "bool"] if narrow else ["float32", "float64", "int32", "int64"])
    tensors = {}
    for k in range(3):
        a, b, c = rnd.randint(1, 20), rnd.randint(0, 9), rnd.randint(0, 9)
        fill = f"rank*{a} + i*{b} - j*{c} + {k}"
        if dtype == "bool":  # 0 or 1, from a sum that stays positive (% of a negative differs)
            fill = f"(rank*{a} + i*{b} + j*{c} + {k}) % 2"
        tensors[f"t{k}"] = {"shape": [2 * n, 3 * n], "fill": fill}
    # Small positive values, so products of up to 4 ranks stay exact in every dtype.
    tensors["small"] = {"shape": [n, 2 * n], "fill": "(rank + i + j) % 3 + 1"}
    ops = ["all_reduce", "reduce", "broadcast", "all_gather", "gather", "scatter", "reduce_scatter",
           "all_to_all", "send_recv"]
    if narrow:
        del tensors["small"]
        ops = ["send_recv"]
    out = []
    for s in range(steps):
        op = ops[s % len(ops)] if s < len(ops) else rnd.choice(ops)
        step = {"op": op, "input": rnd.choice(sorted(tensors)), "output": f"r{s}"}
        if op in ("all_reduce", "reduce", "reduce_scatter"):
            step["reduce"] = rnd.choice(["sum", "max", "min", "prod"])
            if step["reduce"] == "prod":
                step["input"] = "small"
        if op in ("all_gather", "gather", "scatter", "reduce_scatter", "all_to_all"):
            step["dim"] = rnd.choice([0, 1])
        if op in ("reduce", "gather"):
            step["dst"] = rnd.randrange(n)
        if op in ("broadcast", "scatter"):
            step["src"] = rnd.randrange(n)
        if op == "send_recv":
            step["src"], step["dst"] = rnd.sample(range(n), 2)
        out.append(step)
    return n, {"name": f"oracle_{seed}", "world_size": n, "dtype": dtype, "timeout": 60, "tensors": tensors, "steps": out}


def load(path):
    with open(path) as f:
        return {(r["step"], r["rank"]): r["values"] for r in map(json.loads, f) if "values" in r}


def flat(v):
    return [x for e in v for x in flat(e)] if isinstance(v, list) else [v]


def close(a, b):
    return abs(a - b) <= 1e-5 * max(1.0, abs(b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("distrun")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--narrow-seeds", type=int, default=2, help="int16/bool send_recv scenarios after --seeds")
    ap.add_argument("--steps", type=int, default=14)
    args = ap.parse_args()
    if subprocess.run([PY, "-c", "import torch, yaml"], capture_output=True).returncode != 0:
        print("SKIP: Debian's python3-torch (and python3-yaml) is not installed")
        return 77
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds + args.narrow_seeds):
            n, scenario = generate(seed, args.steps, narrow=seed >= args.seeds)
            path = os.path.join(tmp, f"oracle_{seed}.yaml")
            with open(path, "w") as f:
                json.dump(scenario, f)  # JSON is YAML
            ours, theirs = os.path.join(tmp, f"d{seed}.jsonl"), os.path.join(tmp, f"t{seed}.jsonl")
            for cmd in ([args.distrun, "--nproc-per-node", str(n), "--results", ours, path],
                        [args.distrun, "--nproc-per-node", str(n), "--", PY, os.path.join(HERE, "torch_oracle.py"), path, theirs]):
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    print(f"FAIL seed {seed}: {' '.join(cmd)} exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
                    return 1
            a, b = load(ours), load(theirs)
            if a.keys() != b.keys():
                print(f"FAIL seed {seed}: records differ: only distrun {sorted(a.keys() - b.keys())}, "
                      f"only torch {sorted(b.keys() - a.keys())}")
                failures += 1
            for key in sorted(a.keys() & b.keys()):
                x, y = flat(a[key]), flat(b[key])
                if len(x) != len(y) or not all(close(p, q) for p, q in zip(x, y)):
                    step = scenario["steps"][key[0]]
                    print(f"FAIL seed {seed} step {key[0]} rank {key[1]} {step}: distrun {a[key]} torch {b[key]}")
                    failures += 1
            print(f"seed {seed}: {n} ranks, {scenario['dtype']}, {len(scenario['steps'])} steps, "
                  f"{len(a)} records compared with torch: {'ok' if not failures else 'DIFFERENT'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

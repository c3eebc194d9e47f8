#!/usr/bin/python3
"""Every reduce op on every dtype, with sums that overflow and NaN on one rank or another,
against torch's own arithmetic: distrun runs all_reduce, reduce (to rank 1) and
reduce_scatter (the run checks itself: exit 0), and its --results must equal what torch
computes from the same inputs:

  sum, prod      torch.add / torch.mul folded over the ranks in the dtype (integers wrap, a
                 float16 sum past 65504 is inf)
  avg            that sum divided by the ranks: integers truncate toward zero
                 (torch.div(rounding_mode="trunc"), as NCCL's ncclAvg), floats divide
  min, max       torch.minimum / torch.maximum: a NaN on any rank gives NaN
  band/bor/bxor  torch.bitwise_and / _or / _xor

bool follows the same torch arithmetic (add is or, mul and minimum are and, maximum is or);
avg of bool has no meaning in torch and is one of the refusals below.

torch 1.13's gloo has no avg and keeps a NaN in min/max only when rank 0 holds it, so the
definition is torch's arithmetic, not its gloo collective. Where torch's gloo has the op and
dtype (everything but avg and bfloat16), torch.distributed.all_reduce itself runs too (under
distrun) and must agree with distrun's all_reduce: on every element, except min/max where a
rank other than 0 holds a NaN. torch 1.13's gloo refuses every reduction of int16 and bool
("Invalid scalar type"), which distrun defines by torch's arithmetic: that difference is
checked too (torch must still refuse them). torch 1.13 has no uint64, nor has distrun.

Refusals agree as well: where torch raises (a bitwise op on a float, avg of bool), distrun
must refuse the scenario before launch with exit 2 and a file:line:col message.

Usage: reduce_semantics.py DISTRUN_BINARY
       reduce_semantics.py --torch-worker DTYPE RESULTS.json   (one rank, under distrun)
       reduce_semantics.py --torch-refusals RESULTS.json       (one rank, under distrun)
Exit 0 when all agree, 1 on any difference, 77 (skip) when torch is not installed.
"""
import functools
import json
import math
import os
import subprocess
import sys
import tempfile

PY = "/usr/bin/python3"
WORLD = 3
# Per rank, per element: overflow for every integer type, mixed signs, and (floats) NaN on
# rank 0, on rank 1, on rank 2, infinities and a float16 overflow.
INTS = {
    "int8": [[100, -100, 7, 127, -128, 3], [100, -100, -9, 1, -1, 5], [100, -100, 4, 1, -1, -6]],
    "uint8": [[200, 0, 7, 255, 1, 3], [200, 0, 9, 1, 255, 5], [200, 0, 4, 1, 1, 6]],
    "int32": [[2**30, -2**30, 7, 2**31 - 1, -2**31, 65536], [2**30, -2**30, -9, 1, -1, 65536], [2**30, -2**30, 4, 1, -1, -65536]],
    "int16": [[32767, -32768, 300, 7, -1, 200], [1, -1, 300, -9, -1, 200], [1, -1, 300, 4, -1, -200]],
    "int64": [[2**60, -2**62, 2**53 + 1, 2**63 - 1, -2**63, 3], [2**60 + 256, -2**62, 2**53 + 1, 1, -1, 5],
              [2**60 + 512, -2**62, -1, 1, -1, -6]],
    # Every column a different mix of true and false (xor parities 1, 0, 0, 0, 1, 0).
    "bool": [[1, 1, 1, 0, 0, 0], [1, 1, 0, 1, 0, 0], [1, 0, 1, 1, 1, 0]],
}
INT_OPS = ["sum", "avg", "prod", "min", "max", "band", "bor", "bxor"]
# (dtype, op) that torch refuses and distrun must refuse too (exit 2, before launch).
REFUSALS = [("float32", "band"), ("float64", "bxor"), ("bfloat16", "bor"), ("bool", "avg")]
# (dtype, op) that torch 1.13's gloo refuses but distrun defines by torch's arithmetic.
GLOO_REFUSES = [("int16", "sum"), ("int16", "bxor"), ("bool", "sum"), ("bool", "band")]
NAN, INF = "nan", "inf"
FLOATS = {
    "float16": [[NAN, 1.5, 60000, 1, -2, INF], [1, NAN, 60000, 2, -3, 1], [2, 3, 60000, NAN, -4, -1]],
    "bfloat16": [[NAN, 1.5, 3e38, 1, -2, INF], [1, NAN, 3e38, 2, -3, 1], [2, 3, 3e38, NAN, -4, -1]],
    "float32": [[NAN, 1.5, 3e38, 1, -2, INF], [1, NAN, 3e38, 2, -3, 1], [2, 3, 3e38, NAN, -4, -1]],
    "float64": [[NAN, 1.5, 1e308, 1, -2, INF], [1, NAN, 1e308, 2, -3, 1], [2, 3, 1e308, NAN, -4, -1]],
}


def literal(v):
    return {"nan": "0/0", "inf": "1/0"}.get(v, repr(v)) if isinstance(v, str) else str(v)


def fill_expr(table):
    # Nested ternaries over rank and i (0/0 is NaN, 1/0 inf).
    by_rank = []
    for r, row in enumerate(table):
        e = literal(row[-1])
        for i in range(len(row) - 2, -1, -1):
            e = f"(i == {i} ? {literal(row[i])} : {e})"
        by_rank.append((r, e))
    e = by_rank[-1][1]
    for r, sub in reversed(by_rank[:-1]):
        e = f"(rank == {r} ? {sub} : {e})"
    return e


def scenario(dtype, table, ops):
    # int64 values past 2^53 cannot come from an expression (evaluated in double): each
    # rank's row comes from a scatter of literal values from rank 0.
    tensors, steps = {}, []
    if dtype == "int64":
        tensors["x"] = {"shape": [len(table[0])], "dtype": dtype}
        tensors["rows"] = {"values": [v for row in table for v in row], "dtype": dtype}
        steps.append({"op": "scatter", "input": "rows", "output": "x", "src": 0, "print": False})
    else:
        tensors["x"] = {"shape": [len(table[0])], "dtype": dtype, "fill": fill_expr(table)}
    for op in ops:
        steps.append({"op": "all_reduce", "input": "x", "output": f"all_{op}", "reduce": op, "print": False})
        steps.append({"op": "reduce", "input": "x", "output": f"to1_{op}", "reduce": op, "dst": 1, "print": False})
        steps.append({"op": "reduce_scatter", "input": "x", "output": f"rs_{op}", "reduce": op, "print": False})
    return {"name": f"reduce_{dtype}", "world_size": WORLD, "timeout": 60, "tensors": tensors, "steps": steps}


def torch_expected(torch, dtype, table, op):
    xs = inputs(torch, dtype, table)
    fold = {"sum": torch.add, "avg": torch.add, "prod": torch.mul, "min": torch.minimum, "max": torch.maximum,
            "band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}[op]
    out = functools.reduce(fold, xs)
    if op == "avg":
        out = torch.div(out, WORLD, rounding_mode="trunc") if not out.is_floating_point() else out / WORLD
    return out


def same(a, b, dtype):
    if dtype.startswith(("float", "bfloat")):
        if isinstance(a, str) or isinstance(b, str) or math.isnan(a) or math.isnan(b):
            return str(a) == str(b) or (_nan(a) and _nan(b))
        if math.isinf(a) or math.isinf(b):
            return a == b
        return abs(a - b) <= {"float16": 1e-3, "bfloat16": 1e-2}.get(dtype, 1e-6) * max(1.0, abs(b))
    return a == b


def _nan(v):
    return (isinstance(v, str) and v.lower() == "nan") or (isinstance(v, float) and math.isnan(v))


GLOO_OPS = ["sum", "prod", "min", "max", "band", "bor", "bxor"]


def gloo_ops(dtype):
    if dtype in ("bfloat16", "int16", "bool"):
        return []
    return [op for op in GLOO_OPS if dtype in INTS or not op.startswith("b")]


def int_ops(dtype):
    return [op for op in INT_OPS if (dtype, op) not in REFUSALS]


def inputs(torch, dtype, table):
    tdtype = getattr(torch, dtype)
    if dtype in INTS:
        return [torch.tensor(row, dtype=tdtype) for row in table]
    return [torch.tensor([float(v) for v in row], dtype=torch.float64).to(tdtype) for row in table]


def torch_worker(dtype, out):
    """One rank of torch.distributed over gloo: all_reduce of this rank's row for each op."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    table = {**INTS, **FLOATS}[dtype]
    ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
           "max": dist.ReduceOp.MAX, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
    results = {}
    for op in gloo_ops(dtype):
        t = inputs(torch, dtype, table)[rank].clone()
        dist.all_reduce(t, ops[op])
        results[op] = t.tolist()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def torch_refusals(out):
    """One rank of torch.distributed over gloo: which of REFUSALS and GLOO_REFUSES it raises on."""
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    ops = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND,
           "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}
    results = {}
    for dtype, op in REFUSALS + GLOO_REFUSES:
        t = torch.ones(WORLD, dtype=getattr(torch, dtype))
        try:
            dist.all_reduce(t, ops[op])
            results[f"{dtype} {op}"] = "ran"
        except RuntimeError as e:
            results[f"{dtype} {op}"] = "refused: " + str(e).splitlines()[0]
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


def check_refusals(distrun, tmp):
    """Both refuse REFUSALS (distrun: exit 2 and file:line:col); torch's gloo refuses GLOO_REFUSES."""
    failures = 0
    theirs = os.path.join(tmp, "refusals.torch.json")
    p = subprocess.run([distrun, "--nproc-per-node", str(WORLD), "--", PY, os.path.abspath(__file__),
                        "--torch-refusals", theirs], capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print(f"FAIL refusals: torch.distributed exited {p.returncode}\n{p.stderr[-2000:]}")
        return 1
    torch_says = json.load(open(theirs))
    for dtype, op in REFUSALS + GLOO_REFUSES:
        if not torch_says[f"{dtype} {op}"].startswith("refused"):
            print(f"FAIL {dtype} {op}: torch's gloo {torch_says[f'{dtype} {op}']}, expected it to refuse")
            failures += 1
    for dtype, op in REFUSALS:
        path = os.path.join(tmp, f"refuse_{dtype}_{op}.yaml")
        with open(path, "w") as f:
            json.dump({"world_size": WORLD, "tensors": {"x": {"shape": [WORLD], "dtype": dtype, "fill": 1}},
                       "steps": [{"op": "all_reduce", "input": "x", "reduce": op}]}, f)
        p = subprocess.run([distrun, "--nproc-per-node", str(WORLD), path], capture_output=True, text=True, timeout=60)
        located = p.stderr.startswith(f"distrun: error: {path}:1:")
        if p.returncode != 2 or not located:
            print(f"FAIL {dtype} {op}: torch {torch_says[f'{dtype} {op}']}; distrun exited {p.returncode}: {p.stderr[-500:]}")
            failures += 1
        else:
            print(f"{dtype} {op}: both refuse (distrun exit 2: {p.stderr.strip()[-120:]})")
    return failures


def main():
    if sys.argv[1] == "--torch-worker":
        torch_worker(sys.argv[2], sys.argv[3])
        return 0
    if sys.argv[1] == "--torch-refusals":
        torch_refusals(sys.argv[2])
        return 0
    distrun = sys.argv[1]
    try:
        import torch
    except ImportError:
        print("SKIP: Debian's python3-torch is not installed")
        return 77
    failures = 0
    cases = [(d, t, int_ops(d)) for d, t in INTS.items()]
    cases += [(d, t, ["sum", "avg", "prod", "min", "max"]) for d, t in FLOATS.items()]
    with tempfile.TemporaryDirectory() as tmp:
        failures += check_refusals(distrun, tmp)
        for dtype, table, ops in cases:
            path, results = os.path.join(tmp, f"{dtype}.yaml"), os.path.join(tmp, f"{dtype}.jsonl")
            with open(path, "w") as f:
                json.dump(scenario(dtype, table, ops), f)
            p = subprocess.run([distrun, "--nproc-per-node", str(WORLD), "--results", results, path],
                               capture_output=True, text=True, timeout=300)
            if p.returncode != 0:
                print(f"FAIL {dtype}: distrun exited {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
                failures += 1
                continue
            records = {(r["name"], r["rank"]): r["values"] for r in map(json.loads, open(results)) if "values" in r}
            compared = 0
            for op in ops:
                want = torch_expected(torch, dtype, table, op).tolist()
                chunk = len(want) // WORLD
                checks = [((f"all_{op}", r), want) for r in range(WORLD)] + [((f"to1_{op}", 1), want)]
                checks += [((f"rs_{op}", r), want[r * chunk:(r + 1) * chunk]) for r in range(WORLD)]
                for key, expect in checks:
                    got = records.get(key)
                    if got is None or len(got) != len(expect) or not all(same(a, b, dtype) for a, b in zip(got, expect)):
                        print(f"FAIL {dtype} {key[0]} rank {key[1]}: distrun {got} torch {expect}")
                        failures += 1
                    compared += 1
            # torch.distributed over gloo, where it has the op and dtype: the same exit code (0)
            # and the same all_reduce values.
            if gloo_ops(dtype):
                theirs = os.path.join(tmp, f"{dtype}.torch.json")
                p = subprocess.run([distrun, "--nproc-per-node", str(WORLD), "--", PY, os.path.abspath(__file__),
                                    "--torch-worker", dtype, theirs], capture_output=True, text=True, timeout=300)
                if p.returncode != 0:
                    print(f"FAIL {dtype}: torch.distributed exited {p.returncode}\n{p.stderr[-2000:]}")
                    failures += 1
                    continue
                gloo = json.load(open(theirs))
                for op in gloo_ops(dtype):
                    ours = records.get((f"all_{op}", 0))
                    for e, (a, b) in enumerate(zip(ours, gloo[op])):
                        # torch's gloo keeps a NaN in min/max only from rank 0: no definition to match.
                        nan_elsewhere = any(_nan(row[e]) for row in table[1:])
                        if op in ("min", "max") and nan_elsewhere:
                            continue
                        if not same(a, b, dtype):
                            print(f"FAIL {dtype} all_reduce {op} element {e}: distrun {a} torch.distributed {b}")
                            failures += 1
                        compared += 1
            print(f"{dtype}: {', '.join(ops)}: {compared} results compared with torch")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

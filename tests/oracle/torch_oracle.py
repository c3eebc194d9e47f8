#!/usr/bin/python3
"""Runs a (generated) scenario with torch.distributed over gloo and writes the results as
distrun's --results JSON Lines ({"step", "rank", "values"}), so distrun's answers can be
checked against torch's. Supports the subset run_oracle.py generates: tensors with integer
shapes and fills over rank, world_size, i, j, idx using + - * % and parentheses; steps
all_reduce, reduce, broadcast, all_gather, gather, scatter, reduce_scatter (emulated: torch's
gloo has none), all_to_all (even) and send_recv, with dim 0 or 1.

Usage (under distrun or torchrun): torch_oracle.py SCENARIO.yaml RESULTS.jsonl
"""
import json
import sys

import torch
import torch.distributed as dist
import yaml

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32, "int64": torch.int64,
          "int16": torch.int16, "bool": torch.bool}
OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def build(spec, rank, n, default_dtype):
    shape = [int(s) for s in spec["shape"]]
    dtype = DTYPES[spec.get("dtype", default_dtype)]
    rows, cols = shape
    fill = str(spec.get("fill", 0))
    values = [[eval(fill, {"__builtins__": {}}, {"rank": rank, "world_size": n, "i": i, "j": j, "idx": i * cols + j})
               for j in range(cols)] for i in range(rows)]
    return torch.tensor(values, dtype=dtype)


def all_to_all(x, n, dim):
    chunks = [c.contiguous() for c in x.chunk(n, dim)]
    flat_in = torch.cat([c.flatten() for c in chunks])
    flat_out = torch.empty_like(flat_in)
    dist.all_to_all_single(flat_out, flat_in)
    return torch.cat([p.reshape(chunks[0].shape) for p in flat_out.chunk(n)], dim)


def run_step(step, tensors, rank, n):
    op, x = step["op"], tensors[step["input"]]
    dim = step.get("dim", 0)
    red = OPS[step.get("reduce", "sum")]
    if op == "all_reduce":
        t = x.clone()
        dist.all_reduce(t, red)
        return t
    if op == "reduce":
        t = x.clone()
        dist.reduce(t, step["dst"], red)
        return t if rank == step["dst"] else None
    if op == "broadcast":
        t = x.clone()
        dist.broadcast(t, step["src"])
        return t
    if op == "all_gather":
        parts = [torch.empty_like(x) for _ in range(n)]
        dist.all_gather(parts, x.contiguous())
        return torch.cat(parts, dim)
    if op == "gather":
        parts = [torch.empty_like(x) for _ in range(n)] if rank == step["dst"] else None
        dist.gather(x.contiguous(), parts, dst=step["dst"])
        return torch.cat(parts, dim) if rank == step["dst"] else None
    if op == "scatter":
        chunks = [c.contiguous() for c in x.chunk(n, dim)]
        out = torch.empty_like(chunks[0])
        dist.scatter(out, chunks if rank == step["src"] else None, src=step["src"])
        return out
    if op == "reduce_scatter":
        t = x.clone()
        dist.all_reduce(t, red)
        return t.chunk(n, dim)[rank].contiguous()
    if op == "all_to_all":
        return all_to_all(x, n, dim)
    if op == "send_recv":
        if rank == step["src"]:
            dist.send(x.contiguous(), step["dst"])
        elif rank == step["dst"]:
            t = torch.empty_like(x)
            dist.recv(t, step["src"])
            return t
        return None
    raise SystemExit(f"torch_oracle: unsupported op {op}")


def main():
    scenario = yaml.safe_load(open(sys.argv[1]))
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    default_dtype = scenario.get("dtype", "float32")
    tensors = {name: build(spec, rank, n, default_dtype) for name, spec in scenario["tensors"].items()}
    records = []
    for k, step in enumerate(scenario["steps"]):
        result = run_step(step, tensors, rank, n)
        if result is not None:
            tensors[step["output"]] = result
            records.append({"step": k, "rank": rank, "values": result.tolist()})
    everyone = [None] * n
    dist.all_gather_object(everyone, records)
    if rank == 0:
        with open(sys.argv[2], "w") as f:
            for rec in sorted((r for recs in everyone for r in recs), key=lambda r: (r["step"], r["rank"])):
                f.write(json.dumps(rec) + "\n")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

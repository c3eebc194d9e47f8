#!/usr/bin/python3
"""busbw of torch.distributed collectives over gloo, in nccl-tests' terms, for comparison with
`distrun`'s bench step. Run under torchrun/distrun (reads RANK, WORLD_SIZE, MASTER_*).

Usage: torch_bench.py --collectives all_reduce,all_gather --sizes 1M,16M,64M --iters 20 --warmup 5
Prints, on rank 0, one JSON object per (collective, size):
  {"system": "torch", "collective", "bytes", "world_size", "time_us", "algbw_gbps", "busbw_gbps", "p50_us"}
time_us is the slowest rank's mean; p50_us the median over iterations of each iteration's slowest
rank (distrun-bench's p50, nccl-tests' -I: pooling every rank's calls would pull it down by the
ranks that waited least). send_recv: each rank sends to its right and receives from its left.
`bytes` is nccl-tests' size: the whole buffer (all_gather's output, reduce_scatter's input,
all_to_all's per-rank send buffer, the tensor itself for all_reduce and broadcast).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist

UNITS = {"K": 1024, "M": 1024**2, "G": 1024**3}


def parse_size(s):
    return int(s[:-1]) * UNITS[s[-1]] if s[-1] in UNITS else int(s)


def element_count(nbytes):
    return max(1, nbytes // 4)


def bus_factor(coll, n):
    return {"all_reduce": 2 * (n - 1) / n, "broadcast": 1.0, "reduce": 1.0, "send_recv": 1.0}.get(coll, (n - 1) / n)


def make_op(coll, nbytes, n, rank):
    count = element_count(nbytes)
    if coll in ("all_gather", "all_to_all", "reduce_scatter") and count // n == 0:
        # Every rank alike, before any call: gloo dies of SIGFPE on blocks of no elements.
        raise RuntimeError(f"{count} elements make no block for each of {n} ranks")
    if coll == "all_reduce":
        t = torch.ones(count)
        return lambda: dist.all_reduce(t)
    if coll == "broadcast":
        t = torch.ones(count)
        return lambda: dist.broadcast(t, src=0)
    if coll == "all_gather":
        shard = torch.ones(count // n)
        out = [torch.empty(count // n) for _ in range(n)]
        return lambda: dist.all_gather(out, shard)
    if coll == "all_to_all":
        inp = torch.ones(count)
        out = torch.empty(count)
        return lambda: dist.all_to_all_single(out, inp)
    if coll == "send_recv":
        t, got = torch.ones(count), torch.empty(count)

        def exchange():
            reqs = [dist.isend(t, (rank + 1) % n), dist.irecv(got, (rank - 1) % n)]
            for r in reqs:
                r.wait()
        return exchange
    if coll == "reduce_scatter":
        inp = [torch.ones(count // n) for _ in range(n)]
        out = torch.empty(count // n)
        return lambda: dist.reduce_scatter(out, inp)
    raise SystemExit(f"unknown collective {coll}")


def measure(coll, nbytes, n, rank, iters, warmup):
    """One row: the slowest rank's mean time and the p50 of each iteration's slowest rank."""
    try:
        op = make_op(coll, nbytes, n, rank)
        for _ in range(warmup):
            op()
        dist.barrier()
        samples = []
        for _ in range(iters):
            start = time.perf_counter()
            op()
            samples.append(time.perf_counter() - start)
        mean = torch.tensor([sum(samples) / iters], dtype=torch.float64)
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)  # the slowest rank's mean, as nccl-tests
        per_rank = [torch.empty(iters, dtype=torch.float64) for _ in range(n)]
        dist.all_gather(per_rank, torch.tensor(samples, dtype=torch.float64))
        slowest = torch.stack(per_rank).max(dim=0).values  # an iteration ends with its last rank
        t = mean.item()
        return {"system": "torch", "collective": coll, "bytes": nbytes, "world_size": n, "iters": iters,
                "time_us": t * 1e6, "algbw_gbps": nbytes / t / 1e9, "busbw_gbps": nbytes / t / 1e9 * bus_factor(coll, n),
                "p50_us": torch.quantile(slowest, 0.5).item() * 1e6}
    except RuntimeError as e:  # e.g. reduce_scatter: not supported by torch's gloo backend
        return {"system": "torch", "collective": coll, "bytes": nbytes, "world_size": n,
                "error": str(e).splitlines()[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collectives", default="all_reduce,all_gather,all_to_all,broadcast,reduce_scatter")
    ap.add_argument("--sizes", default="1M,16M,64M")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    for coll in args.collectives.split(","):
        for size in args.sizes.split(","):
            row = measure(coll, parse_size(size), n, rank, args.iters, args.warmup)
            if rank == 0:
                print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""torch_bench.py's measurement, several (sizes, iters, warmup) groups in one torchrun job, so
that small sizes get enough iterations to rise above scheduler noise without paying torchrun's
start-up once per group. Rows are torch_bench.py's JSON objects with torch's version, printed
on rank 0.

Usage (under torchrun): torch_sweep.py --collectives C1,C2 --group 1M:200:20 --group 16M,64M:10:3
  each --group is SIZES:ITERS:WARMUP[:COLLECTIVES], its own collectives instead of --collectives'
  (collective after collective, each through the groups that name it)
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_bench import measure, parse_size  # noqa: E402  the same buffers, factors and figures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--collectives", default="")
    ap.add_argument("--group", action="append", required=True)
    args = ap.parse_args()
    groups = [(g + ":" + args.collectives).split(":")[:4] for g in args.group]
    order = list(dict.fromkeys(c for *_, colls in groups for c in colls.split(",") if c))
    dist.init_process_group("gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    for coll in order:
        for sizes, iters, warmup, colls in groups:
            if coll not in colls.split(","):
                continue
            for size in sizes.split(","):
                row = measure(coll, parse_size(size), n, rank, int(iters), int(warmup))
                if rank == 0:  # with torch's version: no second start of torch to ask it
                    print(json.dumps({**row, "torch": torch.__version__}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

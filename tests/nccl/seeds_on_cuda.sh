#!/bin/sh
# Every seed scenario of configs/seeds/ on the GPUs with --device cuda (NCCL), compared with
# its golden values; seeds that need more ranks than this host has GPUs are skipped (NCCL
# runs one rank per GPU). Skips (77) without a GPU.
# usage: seeds_on_cuda.sh WORKER REPO
worker=$1 repo=$2
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${gpus:-0}" -eq 0 ]; then
  echo "SKIP: no CUDA device visible (nvidia-smi -L lists none)"
  exit 77
fi
exec /usr/bin/python3 "$repo/tests/golden/check_seeds.py" --worker "$worker" --repo "$repo" --device cuda --max-world "$gpus"

#!/bin/sh
# Every seed scenario of configs/seeds/ on the GPUs with --device cuda (NCCL), compared with
# its golden values; seeds that need more ranks than this host has GPUs are skipped (NCCL
# runs one rank per GPU). Skips (77) without a GPU.
# usage: seeds_on_cuda.sh WORKER REPO
worker=$1 repo=$2
gpus=$(sh "$repo/scripts/gpu/visible_gpus.sh" "$(dirname "$worker")/distrun" "$repo" 2>/dev/null)
if [ "${gpus:-0}" -eq 0 ]; then
  echo "SKIP: no CUDA device visible (scripts/gpu/visible_gpus.sh counts none)"
  exit 77
fi
exec /usr/bin/python3 "$repo/tests/golden/check_seeds.py" --worker "$worker" --repo "$repo" --device cuda --max-world "$gpus"

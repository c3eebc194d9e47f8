#!/bin/sh
# Every configs/seeds scenario (and tests/nccl/data's GPU scenarios) end to end on the visible
# GPUs: the real launcher, one process per GPU, `--backend nccl --device cuda`. A scenario with
# a fixed world_size runs at that size when there are enough GPUs (else it is listed as not
# run); one without runs on all visible GPUs (8 ranks on an 8-GPU machine). Skips (77) without
# a GPU. Usage: gpu_seeds_e2e.sh DISTRUN REPO_ROOT
set -u
distrun=$1
root=$2
gpus=$(sh "$root/scripts/gpu/visible_gpus.sh" "$distrun" "$root" 2>/dev/null)
if [ "${gpus:-0}" -eq 0 ]; then
  echo "SKIP: no CUDA device visible ($("$distrun" --nproc-per-node gpu --check "$root/configs/demo.yaml" 2>&1)); these scenarios need one per rank"
  exit 77
fi
ran=0
failed=""
for f in "$root"/configs/seeds/*.yaml "$root"/tests/nccl/data/*.yaml; do
  case $(basename "$f") in bench_*) continue ;; esac
  # NCCL has no bitwise reductions: those seeds run on the CPU (seeds_on_cuda.sh does the same).
  if grep -Eq 'op: *(band|bor|bxor)' "$f"; then
    echo "not run: $(basename "$f") uses a bitwise reduction NCCL does not have"
    continue
  fi
  w=$(sed -n 's/^world_size: *\([0-9][0-9]*\).*/\1/p' "$f" | head -1)
  [ -n "$w" ] || w=$gpus
  if [ "$w" -gt "$gpus" ]; then
    echo "not run: $(basename "$f") needs $w GPUs, $gpus visible"
    continue
  fi
  echo "== $(basename "$f") on $w GPUs"
  if ! timeout 300 "$distrun" --nproc-per-node "$w" --backend nccl --device cuda "$f"; then
    failed="$failed $(basename "$f")"
  fi
  ran=$((ran + 1))
done
if [ "$ran" -eq 0 ]; then
  echo "SKIP: no scenario fits on $gpus GPU(s)"
  exit 77
fi
if [ -n "$failed" ]; then
  echo "FAILED on GPU:$failed"
  exit 1
fi
echo "all $ran scenarios passed on $gpus GPU(s)"

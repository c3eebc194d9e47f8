#!/bin/sh
# Prints how many CUDA devices distrun's workers would see here (CUDA_VISIBLE_DEVICES and
# cgroups honoured), counted by the launcher's own rule (`--nproc-per-node gpu`, the device
# choice of lib/distrun/nccl/device_choice.hpp), so scripts and workers never disagree. Prints 0
# where none is usable; the reason goes to stderr.
# Usage: visible_gpus.sh DISTRUN REPO_ROOT
distrun=$1
root=$2
out=$("$distrun" --nproc-per-node gpu --check "$root/configs/demo.yaml" 2>&1)
n=$(printf '%s\n' "$out" | sed -n 's/.*: ok (world_size \([0-9][0-9]*\))$/\1/p')
if [ -z "$n" ]; then
  printf '%s\n' "$out" >&2
  n=0
fi
echo "$n"

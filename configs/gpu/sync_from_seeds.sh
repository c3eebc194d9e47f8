#!/bin/sh
# Regenerates configs/gpu/ from configs/seeds/: each seed scenario, comment header kept, with
# `backend: nccl` and `device: cuda` set (replacing any backend/device line the seed has).
# With --check, changes nothing and exits 1 when configs/gpu/ is out of date.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
seeds="$here/../seeds"
check=0
[ "${1:-}" = "--check" ] && check=1
status=0

gpu_version() {
  # The two keys go right after the leading comment block, before the first key of the seed.
  awk '
    /^(backend|device):/ { next }
    !done && !/^#/ { print "backend: nccl"; print "device: cuda"; done = 1 }
    { print }
    END { if (!done) { print "backend: nccl"; print "device: cuda" } }
  ' "$1"
}

for seed in "$seeds"/*.yaml; do
  [ -e "$seed" ] || { echo "no seed scenarios in $seeds" >&2; exit 1; }
  out="$here/$(basename "$seed")"
  if [ $check = 1 ]; then
    if ! gpu_version "$seed" | cmp -s - "$out"; then
      echo "out of date: $out (run $0)" >&2
      status=1
    fi
  else
    gpu_version "$seed" > "$out"
  fi
done
# A GPU config whose seed is gone is stale too.
for cfg in "$here"/*.yaml; do
  [ -e "$cfg" ] || continue
  if [ ! -e "$seeds/$(basename "$cfg")" ]; then
    echo "no seed for $cfg" >&2
    status=1
  fi
done
exit $status

#!/usr/bin/env bash
# Launch-to-exit time of a 4-rank trivial all_reduce: distrun (scenario, distrun-worker)
# against torchrun (python3 -m torch.distributed.run; Debian's torch 1.13 spells it --nproc_per_node),
# side by side, with the ratio. Usage: scripts/bench/launch.sh [BUILD_DIR] [RUNS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
runs=${2:-10}
distrun=$build/bin/distrun
scenario=$root/tests/launcher/data/all_reduce_4.yaml
python=/usr/bin/python3
[[ -x $distrun && -x $build/bin/distrun-worker ]] || { echo "launch.sh: build distrun and distrun-worker in $build first" >&2; exit 2; }

prog=$(mktemp --suffix=.py)
trap 'rm -f "$prog"' EXIT
cat > "$prog" <<'PY'
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.arange(4, dtype=torch.float32) + dist.get_rank()
dist.all_reduce(t)
if dist.get_rank() == 0:
    print(t.tolist())
dist.destroy_process_group()
PY

# Mean wall seconds of N runs of the command (after one warm-up run), output discarded.
time_it() {
  local n=$1; shift
  "$@" > /dev/null 2>&1 || { echo "launch.sh: failed: $*" >&2; "$@" >&2 || true; exit 1; }
  local start end
  start=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do "$@" > /dev/null 2>&1; done
  end=$(date +%s.%N)
  awk -v s="$start" -v e="$end" -v n="$n" 'BEGIN { printf "%.4f", (e - s) / n }'
}

d=$(time_it "$runs" "$distrun" --nproc-per-node 4 "$scenario")
echo "distrun : $(printf '%8.3f' "$d") s  (distrun --nproc-per-node 4 all_reduce_4.yaml, mean of $runs)"
if ! $python -c 'import torch.distributed' 2>/dev/null; then
  echo "torchrun: not measured (python3-torch missing at $python)"; exit 0
fi
truns=${TORCHRUN_RUNS:-3}
t=$(time_it "$truns" $python -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1 "$prog")
echo "torchrun: $(printf '%8.3f' "$t") s  (python3 -m torch.distributed.run --nproc_per_node 4 --redirects 1 --tee 1, mean of $truns)"
echo "ratio   : $(awk -v t="$t" -v d="$d" 'BEGIN { printf "%8.1f", t / d }') x  (torchrun / distrun; target: >= 20)"

#!/usr/bin/env bash
# Small-message latency of distrun against Open MPI (vader, shared memory) and, with --torch,
# torch.distributed's gloo, on this host: all_reduce, all_gather, broadcast, reduce_scatter and
# all_to_all at 16 B to 256 KiB (latency.yaml), on 2 and 4 ranks, the systems interleaved in
# every repetition, the median reported; distrun also once more with DISTRUN_SHM_INLINE_BYTES=0
# (no inline slots: what they buy). Prints a Markdown table with distrun/MPI per point, the
# geometric mean and the worst ratio (targets: geomean <= 1.5, no point above 3).
# Also run by compare.sh (step "latency"). Ratios are only meaningful within one run: on a
# shared, loaded host the absolute numbers move with the load.
#
# Usage: scripts/bench/latency.sh [--build DIR] [--out DIR] [--reps N] [--torch] [--ranks "2 4"]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/bench
build=$root/build
out=""
reps=3
torch=0
ranks="2 4"
while (($#)); do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --torch) torch=1; shift ;;
    --ranks) ranks=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "latency.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/latency}
mkdir -p "$out"
py=/usr/bin/python3
[[ -x $build/bin/distrun ]] || "$root/scripts/build.sh" "$build"
colls=all_reduce,all_gather,broadcast,reduce_scatter,all_to_all
sizes=16,512,4K,32K,256K
results=$out/latency.jsonl
: >"$results"
mpicc -O2 -o "$out/mpi_bench" "$here/mpi_bench.c"
mpi_root=()
[[ $(id -u) == 0 ]] && mpi_root=(--allow-run-as-root)
tag() { sed "s/^{/{\"rep\": $1, \"system\": \"$2\", /" >>"$results"; }
for ((rep = 1; rep <= reps; rep++)); do
  for n in $ranks; do
    echo "[latency] rep $rep, $n ranks" >&2
    timeout -k 10 600 "$build/bin/distrun" --nproc-per-node "$n" --results "$out/distrun.jsonl" "$here/latency.yaml" >/dev/null
    grep -o '{.*}' "$out/distrun.jsonl" | tag "$rep" distrun
    # What the inline slots bought: the same run with every byte read in place (single copy).
    DISTRUN_SHM_INLINE_BYTES=0 timeout -k 10 600 "$build/bin/distrun" --nproc-per-node "$n" \
      --results "$out/distrun.jsonl" "$here/latency.yaml" >/dev/null
    grep -o '{.*}' "$out/distrun.jsonl" | tag "$rep" distrun_single_copy
    timeout -k 10 600 mpirun "${mpi_root[@]}" --oversubscribe --mca btl self,vader -np "$n" "$out/mpi_bench" \
      "$colls" "$sizes" 2000 200 | grep -o '{.*}' | sed 's/"system": "mpi", //' | tag "$rep" mpi
    if ((torch)); then
      timeout -k 10 600 "$py" -m torch.distributed.run --standalone --redirects 1 --tee 1 --nproc_per_node "$n" "$here/torch_sweep.py" \
        --collectives "$colls" --group "$sizes:200:20" 2>/dev/null | grep -o '{.*}' | sed 's/"system": "[a-z]*", //' |
        tag "$rep" torch
    fi
  done
done
"$py" "$here/latency_table.py" "$results"

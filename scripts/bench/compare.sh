#!/usr/bin/env bash
# distrun against torchrun / torch.distributed (gloo) and Open MPI on this machine, side by side:
#   1. launch-to-exit of a 4-rank trivial all_reduce (scripts/bench/launch.sh), target >= 20x faster
#   2. busbw of all_reduce, all_gather, all_to_all, broadcast, reduce_scatter at 1, 16 and 64 MiB
#      on 2 and 4 ranks (busbw.yaml, torch_sweep.py over torch_bench.py, mpi_bench.c), target >= torch at every point
#   3. peak RSS of the largest process of a 16 MiB all_reduce on 4 ranks (peak_rss.py), target
#      <= 1/5 of torchrun's
#   4. small-message latency, 16 B..256 KiB, 2 and 4 ranks, against Open MPI and torch
#      (latency.sh; targets: geomean distrun/MPI <= 1.5, no point above 3), into OUT/latency.md
#   5. hierarchical against flat all_reduce between two network-namespace hosts of 2 ranks, the
#      link limited to 1 Gbit/s by tc (hierarchical.py; target >= 1.4x), into OUT/hierarchical.md
#      (as root only: skipped, and said so, otherwise)
# Every measurement is repeated (--reps) with the systems interleaved, and the median is reported.
# Raw rows, the Markdown tables and the busbw PNG go to the output folder.
#
# With --hosts, between hosts instead (hosts.py, as root; see --hosts --help).
#
# Usage: scripts/bench/compare.sh [--build DIR] [--out DIR] [--reps N] [--quick] [--docs] [--strict]
#   --build DIR  distrun's build folder (default: build/; built by scripts/build.sh when missing)
#   --out DIR    where results go (default: BUILD/compare)
#   --reps N     repetitions of every measurement (default 3; --quick: 1)
#   --docs       also update docs/performance.md's table and docs/img/busbw.png
#   --strict     exit 3 when a target is missed
#   --hosts      between hosts instead (--hosts --help)
set -euo pipefail
for arg; do [[ $arg == --hosts ]] && exec "$(dirname "$0")/compare_hosts.sh" "$@"; done
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/bench
build=$root/build
out=""
reps=3
docs=0
strict=()
while (($#)); do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) reps=1; shift ;;
    --docs) docs=1; shift ;;
    --strict) strict=(--strict); shift ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/compare}
py=/usr/bin/python3 # Debian's: torch and matplotlib live there, not in a pyenv python3
colls=all_reduce,all_gather,all_to_all,broadcast,reduce_scatter
# Iterations per size group, the same for the three systems (busbw.yaml spells distrun's).
small=1M small_iters=200 small_warmup=20
large=16M,64M large_iters=10 large_warmup=3
limit=600 # seconds any one job may take; a hung job is an error, never a hang

"$root/scripts/deps.sh" bench
[[ -x $build/bin/distrun && -x $build/bin/distrun-worker ]] || "$root/scripts/build.sh" "$build"
mkdir -p "$out"
results=$out/results.jsonl
log=$out/compare.log
: >"$results"
: >"$log"
mpicc -O2 -o "$out/mpi_bench" "$here/mpi_bench.c"
mpi_root=()
[[ $(id -u) == 0 ]] && mpi_root=(--allow-run-as-root)
# Shared memory between the ranks (vader), Open MPI at its best on one host; oversubscribe: 4 ranks on 2 cores.
mpirun_cmd=(mpirun "${mpi_root[@]}" --oversubscribe --mca btl self,vader)
torchrun_cmd=("$py" -m torch.distributed.run --standalone --redirects 1 --tee 1) # torch 1.13 spellings

start=$(date +%s)
note() { echo "[compare $(($(date +%s) - start))s] $*" >&2; }
# Runs a job under the time limit with its output in the log; on failure shows the log's tail.
job() {
  local what=$1; shift
  echo "### $what: $*" >>"$log"
  if ! timeout -k 10 "$limit" "$@" >>"$out/job.out" 2>>"$log"; then
    echo "compare.sh: $what failed: $*" >&2
    tail -20 "$log" >&2
    exit 1
  fi
}
# Appends the job's JSON rows (lines starting with '{', torchrun's rank prefix dropped) to the
# results, each tagged with kind, rep and, where given, system.
collect() {
  local kind=$1 rep=$2 system=${3:-}
  local tag="\"kind\": \"$kind\", \"rep\": $rep, "
  [[ -n $system ]] && tag+="\"system\": \"$system\", "
  grep -o '{.*}' "$out/job.out" | sed "s/^{/{$tag/" >>"$results" || true
  : >"$out/job.out"
}
: >"$out/job.out"

note "1/5 launch-to-exit, $reps repetitions (launch.sh)"
for ((rep = 1; rep <= reps; rep++)); do
  TORCHRUN_RUNS=1 timeout -k 10 "$limit" "$here/launch.sh" "$build" 5 >"$out/launch.out" 2>>"$log" ||
    { echo "compare.sh: launch.sh failed" >&2; tail -20 "$log" >&2; exit 1; }
  cat "$out/launch.out" >>"$log"
  for system in distrun torchrun; do
    secs=$(awk -v s="$system" '$1 == s || $1 == s ":" { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9.]+$/) { print $i; exit } }' "$out/launch.out")
    [[ -n $secs ]] || { echo "compare.sh: no $system time in launch.sh's output" >&2; cat "$out/launch.out" >&2; exit 1; }
    echo "{\"kind\": \"launch\", \"rep\": $rep, \"system\": \"$system\", \"seconds\": $secs}" >>"$results"
  done
done

note "2/5 busbw on 2 and 4 ranks, $reps repetitions (distrun, torch, Open MPI interleaved)"
for ((rep = 1; rep <= reps; rep++)); do
  for n in 2 4; do
    note "  rep $rep, $n ranks"
    job "distrun busbw n=$n" "$build/bin/distrun" --nproc-per-node "$n" --results "$out/distrun.jsonl" "$here/busbw.yaml"
    : >"$out/job.out"
    cp "$out/distrun.jsonl" "$out/job.out"
    collect busbw "$rep" distrun
    job "torch busbw n=$n" "${torchrun_cmd[@]}" --nproc_per_node "$n" "$here/torch_sweep.py" --collectives "$colls" \
      --group "$small:$small_iters:$small_warmup" --group "$large:$large_iters:$large_warmup"
    collect busbw "$rep"
    job "mpi busbw n=$n" "${mpirun_cmd[@]}" -np "$n" "$out/mpi_bench" "$colls" "$small" "$small_iters" "$small_warmup"
    job "mpi busbw n=$n" "${mpirun_cmd[@]}" -np "$n" "$out/mpi_bench" "$colls" "$large" "$large_iters" "$large_warmup"
    collect busbw "$rep"
  done
done

note "3/5 peak RSS, 16 MiB all_reduce on 4 ranks, $reps repetitions"
for ((rep = 1; rep <= reps; rep++)); do
  job "distrun rss (bench step)" "$py" "$here/peak_rss.py" distrun "$build/bin/distrun" --nproc-per-node 4 "$here/rss_bench.yaml"
  collect rss "$rep" distrun
  job "distrun rss (scenario step)" "$py" "$here/peak_rss.py" distrun_step "$build/bin/distrun" --nproc-per-node 4 "$here/rss_step.yaml"
  collect rss "$rep" distrun_step
  job "torchrun rss" "$py" "$here/peak_rss.py" torchrun "${torchrun_cmd[@]}" --nproc_per_node 4 "$here/torch_bench.py" \
    --collectives all_reduce --sizes 16M --iters 1 --warmup 0
  collect rss "$rep" torchrun
done

note "4/5 latency sweep, $reps repetitions (latency.sh)"
"$here/latency.sh" --build "$build" --out "$out/latency" --reps "$reps" --torch >"$out/latency.md" 2>>"$log" ||
  { echo "compare.sh: latency.sh failed" >&2; tail -20 "$log" >&2; exit 1; }
cat "$out/latency.md" >&2

note "5/5 hierarchical all_reduce between namespace hosts, $reps repetitions (hierarchical.py)"
hier_rc=0
"$py" "$here/hierarchical.py" --build "$build" --reps "$reps" >"$out/hierarchical.md" 2>>"$log" || hier_rc=$?
if ((hier_rc == 77)); then
  echo "compare.sh: step 5 skipped (needs root, ip netns and tc)" >&2
elif ((hier_rc != 0)); then
  echo "compare.sh: hierarchical.py failed" >&2; tail -20 "$log" >&2; exit 1
else
  cat "$out/hierarchical.md" >&2
fi

note "done in $(($(date +%s) - start)) s; raw rows: $results, log: $log"
echo
"$py" "$here/plot.py" "$results" "$out/busbw.png" >&2
docs_args=()
if ((docs)); then
  mkdir -p "$root/docs/img"
  cp "$out/busbw.png" "$root/docs/img/busbw.png"
  docs_args=(--docs "$root/docs/performance.md")
fi
"$py" "$here/summarize.py" "$results" --markdown "$out/compare.md" "${docs_args[@]}" "${strict[@]}"

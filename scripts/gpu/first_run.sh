#!/usr/bin/env bash
# The first run of distrun on a machine with GPUs, in one go, written up as one table:
#  1. all_reduce bandwidth: nccl-tests' all_reduce_perf (when found: on PATH or in
#     $NCCL_TESTS_DIR/build) and distrun-bench, one after the other at the same sizes, iterations
#     and environment, on every visible GPU; once as NCCL chooses and once with NCCL_ALGO=Ring.
#     The algorithm NCCL picked is read from its own log (NCCL_DEBUG=INFO, subsystem TUNING).
#     distrun-bench times as nccl-tests does: its timed iterations are launched back to back and
#     timed with CUDA events (Backend::begin_timed), one host wait per size and placement.
#  2. Threads per operation: 10^4 small all_reduces, gathers, scatters, all_to_alls and
#     send_recvs under strace, counting every thread the workers start (NCCL's own included).
#     They run on blocking communicators once their peers are connected (point-to-point: once
#     its channel is set up), so the count stays at the set-up's, far below one per operation.
#  3. The seeds on however few GPUs there are: every configs/seeds scenario that validates at
#     world size 1, on NCCL with --device cuda, compared value for value with Gloo on the CPU;
#     and every seed at its own world size on Gloo with --device cuda (Gloo may share a GPU),
#     compared with its golden values (tests/golden/check_seeds.py; needs python3 with yaml).
#  4. ctest -L nccl in the Release build and, when there is one, the ASan build (build-asan):
#     the device-free tests, the GPU tests, and the seed scenarios on every visible GPU.
# Usage: scripts/gpu/first_run.sh [BUILD_DIR] [OUT_DIR]   (defaults: build, first_run.<date>)
# Writes OUT_DIR/first_run.md (the table) and every log beside it; exits 2 without a GPU.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
out=${2:-$root/first_run.$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
distrun=$build/bin/distrun
bench=$build/bin/distrun-bench
gpus=$(sh "$root/scripts/gpu/visible_gpus.sh" "$distrun" "$root")
if [[ ${gpus:-0} -eq 0 ]]; then
  echo "first_run: no CUDA device is visible; nothing to run" >&2
  exit 2
fi
sizes=(-b 8 -e 1G -f 4 -n 20 -w 5)
table=$out/first_run.md
{
  echo "# distrun first run: $(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname)"
  echo
  echo "- GPUs visible: $gpus ($(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sort | uniq -c | sed 's/^ *//' | paste -sd';' -))"
  echo "- CUDA_VISIBLE_DEVICES: ${CUDA_VISIBLE_DEVICES-(unset)}; commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null)"
  echo
} >"$table"

# The nccl-tests binary, if any.
perf=$(command -v all_reduce_perf || true)
[[ -z $perf && -n ${NCCL_TESTS_DIR:-} && -x $NCCL_TESTS_DIR/build/all_reduce_perf ]] && perf=$NCCL_TESTS_DIR/build/all_reduce_perf

# "size busbw" of the out-of-place column of an nccl-tests table (distrun-bench prints the same);
# algbw on one GPU, where busbw is 0 by definition (the bus factor (n-1)/n).
bw=8 bw_name=busbw
[[ $gpus -eq 1 ]] && bw=7 bw_name="algbw (one GPU: busbw is 0)"
busbw() { awk -v c=$bw '$1 ~ /^[0-9]+$/ && NF >= 12 { print $1, $c }' "$1"; }
# The algorithms NCCL's tuning log names, e.g. "RING, NVLS".
algos() { grep -oiE "algo(rithm)? *[:=]? *(ring|tree|nvls|nvlstree|collnet[a-z]*|pat)" "$@" 2>/dev/null |
          grep -oiE "(ring|tree|nvls|nvlstree|collnet[a-z]*|pat)$" | tr a-z A-Z | sort -u | paste -sd, -; }

echo "## all_reduce, float, out of place, $gpus GPUs: $bw_name (GB/s)" >>"$table"
for mode in default ring; do
  env_args=(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING)
  [[ $mode == ring ]] && env_args+=(NCCL_ALGO=Ring)
  if [[ -n $perf ]]; then
    echo "== nccl-tests ($mode)"
    env "${env_args[@]}" NCCL_DEBUG_FILE="$out/nccl-tests.$mode.%h.%p.log" \
      timeout 1200 "$perf" "${sizes[@]}" -g "$gpus" | tee "$out/nccl-tests.$mode.txt"
  fi
  echo "== distrun-bench ($mode)"
  env "${env_args[@]}" NCCL_DEBUG_FILE="$out/distrun.$mode.%h.%p.log" \
    timeout 1200 "$distrun" --nproc-per-node "$gpus" "$bench" all_reduce "${sizes[@]}" --device cuda |
    tee "$out/distrun.$mode.txt"
  {
    echo
    echo "### $mode (algorithm NCCL picked: nccl-tests $(algos "$out"/nccl-tests.$mode.*.log || true), distrun $(algos "$out"/distrun.$mode.*.log || true))"
    echo
    echo "| size (B) | nccl-tests | distrun | distrun / nccl-tests |"
    echo "|---:|---:|---:|---:|"
    join -a 2 -e - -o 0,1.2,2.2 <(busbw "$out/nccl-tests.$mode.txt" 2>/dev/null | sort -k1,1) \
      <(busbw "$out/distrun.$mode.txt" | sort -k1,1) | sort -n |
      awk '{ r = ($2 != "-" && $2 > 0) ? sprintf("%.2f", $3 / $2) : "-"; print "| " $1 " | " $2 " | " $3 " | " r " |" }'
  } >>"$table"
done
[[ -z $perf ]] && echo -e "\nnccl-tests not found (all_reduce_perf on PATH or \$NCCL_TESTS_DIR/build): its column is empty." >>"$table"

# Threads started over 10^4 operations of each kind (and, for scale, over 10 of them).
{
  echo
  echo "## Threads started by the workers (strace: clone/clone3), $gpus GPUs"
  echo
} >>"$table"
if command -v strace >/dev/null; then
  echo "| operation | per rank | threads started | per operation and rank |" >>"$table"
  echo "|---|---:|---:|---:|" >>"$table"
  for op in all_reduce gather scatter all_to_all send_recv; do
    for n in 10 10000; do
      echo "== threads over $n ${op}s"
      timeout 600 strace -f -qq -e trace=clone,clone3 -o "$out/threads.$op.$n.strace" \
        "$distrun" --nproc-per-node "$gpus" "$bench" "$op" -b 8 -e 8 -n "$n" -w 0 -c 0 --device cuda \
        >"$out/threads.$op.$n.txt" 2>&1
      started=$(grep -E "clone" "$out/threads.$op.$n.strace" | grep -cE "= [1-9][0-9]*$")  # calls and resumed calls that made one
      echo "| $op | $n | $started | $(awk -v s="$started" -v n="$n" -v g="$gpus" 'BEGIN { printf "%.4f", s / (2 * n * g) }') |" >>"$table"
    done
  done
  echo -e "\nEach size runs out of place and in place (2n operations per rank). One thread per operation would show as about 1 per operation and rank." >>"$table"
else
  echo "strace not found: not counted." >>"$table"
fi

# The seeds: at world size 1 on NCCL against Gloo on the CPU, and at their own sizes on Gloo
# with CUDA tensors against their golden values.
{
  echo
  echo "## Seeds"
  echo
} >>"$table"
ws1=$out/seeds_ws1
mkdir -p "$ws1"
ran=0 differ=""
for f in "$root"/configs/seeds/*.yaml; do
  n=$(basename "$f" .yaml)
  sed 's/^world_size: *[0-9]*/world_size: 1/' "$f" >"$ws1/$n.yaml"
  "$distrun" --nproc-per-node 1 --check "$ws1/$n.yaml" >/dev/null 2>&1 || continue  # needs two ranks
  echo "== $n at world size 1: NCCL and Gloo on the CPU"
  (cd "$ws1" && timeout 120 "$distrun" --nproc-per-node 1 --backend gloo --device cpu --results "$n.cpu.jsonl" "$n.yaml" &&
    timeout 120 "$distrun" --nproc-per-node 1 --backend nccl --device cuda --results "$n.nccl.jsonl" "$n.yaml") \
    >"$ws1/$n.log" 2>&1 && python3 "$root/tests/golden/compare_golden.py" "$ws1/$n.nccl.jsonl" "$ws1/$n.cpu.jsonl" >>"$ws1/$n.log" 2>&1 ||
    differ="$differ $n"
  ran=$((ran + 1))
done
echo "- world size 1, NCCL against Gloo on the CPU: $((ran - $(wc -w <<<"$differ"))) of $ran seeds equal${differ:+; differ or failed:$differ} (seeds_ws1/)" >>"$table"
echo "== every seed on Gloo with --device cuda"
python3 "$root/tests/golden/check_seeds.py" --worker "$build/bin/distrun-worker" --repo "$root" --device cuda \
  --backend gloo >"$out/seeds_gloo_cuda.log" 2>&1
echo "- Gloo with --device cuda at each seed's world size ($gpus GPUs shared): $(tail -1 "$out/seeds_gloo_cuda.log") (seeds_gloo_cuda.log)" >>"$table"

# The test suites: Release, then ASan where it was built.
{
  echo
  echo "## ctest -L nccl (GPU tests, seeds on every visible GPU)"
  echo
  echo "| build | passed | failed | skipped | log |"
  echo "|---|---:|---:|---:|---|"
} >>"$table"
for dir in "$build" "$root/build-asan"; do
  name=$(basename "$dir")
  if [[ ! -f $dir/CTestTestfile.cmake ]]; then
    echo "| $name | - | - | - | not built (scripts/test.sh builds it) |" >>"$table"
    continue
  fi
  echo "== ctest -L nccl in $name"
  (cd "$dir" && ctest -L nccl -j1 --output-on-failure) >"$out/ctest.$name.log" 2>&1
  passed=$(grep -cE "Test +#.* Passed" "$out/ctest.$name.log")
  failed=$(grep -cE "Test +#.*(Failed|Timeout|Exception)" "$out/ctest.$name.log")
  skipped=$(grep -cE "Test +#.*Skipped" "$out/ctest.$name.log")
  echo "| $name | $passed | $failed | $skipped | ctest.$name.log |" >>"$table"
done
echo
cat "$table"

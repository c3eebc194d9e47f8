#!/usr/bin/env bash
# The programs of BUILD_DIR on a host without CUDA (hide_cuda.sh): libdistrun and the programs
# name no CUDA or NCCL library, every program starts, a 4-rank Gloo scenario passes, and
# `--device cuda` exits 2 saying what is missing and how to get it, from the launcher, the worker
# and distrun-bench. Usage: without_cuda.sh BUILD_DIR SOURCE_DIR [CUDA_LIBRARY_DIR...]
set -euo pipefail
build=$1
src=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
for f in "$build"/lib/libdistrun.so "$build"/bin/distrun "$build"/bin/distrun-worker "$build"/bin/distrun-bench; do
  needed=$(readelf -d "$f" | grep NEEDED)
  if grep -Eqi "cuda|nccl" <<<"$needed"; then fail "$f links CUDA: $needed"; fi
  # A CUDA or NCCL function called without a forwarder in nccl/cuda_api.cpp stays undefined
  # and would stop the program at load where CUDA is missing.
  undefined=$(nm -D --undefined-only "$f" | grep -E " (cuda|nccl)[A-Z]" || true)
  [[ -z $undefined ]] || fail "$f needs CUDA or NCCL symbols at load (add them to nccl/cuda_api.cpp): $undefined"
done
hide=("$here/hide_cuda.sh")
for d in "$@"; do hide+=(-d "$d"); done
# The part that runs in the namespace (given with -c: the launcher reads its stdin).
inner=$(cat <<'INNER'
set -uo pipefail
build=$1
src=$2
fail() { echo "FAIL: $*"; exit 1; }
for p in distrun distrun-worker distrun-bench; do
  "$build/bin/$p" --help >/dev/null 2>&1 || fail "$p --help does not start without CUDA"
done
out=$(timeout 120 "$build/bin/distrun" "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1) || fail "Gloo scenario: $out"
grep -q "Rank 3" <<<"$out" || fail "no result of rank 3: $out"
echo "ok: a 4-rank Gloo scenario ran without CUDA"
# The message says what is missing and how to get it; exit 2 (an environment that cannot be used).
expect_missing() {  # NAME RC OUTPUT
  [[ $2 == 2 ]] || fail "$1 exited $2, not 2: $3"
  # (A build without CUDA support says that instead.)
  grep -q "libcudart.so.*install the CUDA\|has no CUDA support" <<<"$3" || fail "$1 does not say what is missing: $3"
  echo "ok: $1 exits 2: $(grep -m1 -o 'no CUDA device.*' <<<"$3" | cut -c1-160)..."
}
out=$(timeout 60 "$build/bin/distrun" --device cuda "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1); expect_missing "distrun --device cuda" $? "$out"
grep -q "worker failed" <<<"$out" && fail "the launcher started workers: $out"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
export RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port
out=$(timeout 60 "$build/bin/distrun-bench" all_reduce -b 8 -e 8 --device cuda 2>&1); expect_missing "distrun-bench --device cuda" $? "$out"
out=$(timeout 60 "$build/bin/distrun-bench" all_reduce -b 8 -e 8 --backend gloo --device cuda 2>&1); expect_missing "distrun-bench --backend gloo --device cuda" $? "$out"
out=$(timeout 60 "$build/bin/distrun" --nproc-per-node gpu "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1)
[[ $? == 2 ]] && grep -q "no CUDA device is visible" <<<"$out" || fail "--nproc-per-node gpu without CUDA: $out"
echo "ok: --nproc-per-node gpu exits 2"
INNER
)
rc=0
"${hide[@]}" bash -c "$inner" _ "$build" "$src" </dev/null || rc=$?
[[ $rc == 0 ]] && echo "PASS: the programs run without CUDA"
exit $rc

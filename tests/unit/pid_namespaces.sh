#!/usr/bin/env bash
# Two ranks on one host, each in its own PID namespace (both are pid 1) with ASLR off (the
# same addresses in both): each can "read" the other's pid and address, but what it finds
# there is its own memory. A constant token would pass that check and all_reduce would sum
# each rank with itself, silently; the per-process nonce must refuse shared memory, so the
# ranks take TCP and get right sums, and forcing shm must be a clear error on both ranks.
# Usage: pid_namespaces.sh BINARY
set -u
bin=$1
command -v unshare >/dev/null && command -v setarch >/dev/null || { echo "SKIP: unshare/setarch missing"; exit 77; }
unshare --pid --fork --mount-proc true 2>/dev/null || { echo "SKIP: cannot create PID namespaces here (needs root or user namespaces)"; exit 77; }
tmp=$(mktemp -d)
pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail=0
run() {  # run TRANSPORT: both ranks, each in its own PID namespace, ASLR off
  local port
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  pids=()
  for r in 0 1; do
    DISTRUN_TRANSPORT=$1 RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout -k 5 60 unshare --pid --fork --mount-proc --kill-child setarch "$(uname -m)" -R "$bin" 20 4096 5000 \
      >"$tmp/out$r" 2>"$tmp/err$r" &
    pids+=($!)
  done
  codes=()
  for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
}
run auto
for r in 0 1; do
  echo "auto, rank $r exited ${codes[$r]}: $(cat "$tmp/out$r" "$tmp/err$r" | tr '\n' ' ')"
  [[ ${codes[$r]} == 0 ]] || { echo "FAIL: rank $r should succeed over TCP"; fail=1; }
  grep -q "rank $r: transport tcp" "$tmp/out$r" || { echo "FAIL: rank $r did not fall back to tcp"; fail=1; }
  grep -q "rank $r: ok 3" "$tmp/out$r" || { echo "FAIL: rank $r's sums are wrong"; fail=1; }
done
run shm
for r in 0 1; do
  echo "shm, rank $r exited ${codes[$r]}: $(tail -n 1 "$tmp/err$r")"
  [[ ${codes[$r]} == 1 ]] || { echo "FAIL: forced shm across PID namespaces should fail on rank $r"; fail=1; }
  grep -q "cannot read each other's memory" "$tmp/err$r" || { echo "FAIL: rank $r's error does not say why"; fail=1; }
done
exit $fail

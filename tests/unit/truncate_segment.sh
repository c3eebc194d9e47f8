#!/usr/bin/env bash
# Fault: while two ranks run all_reduce through the shared segment, an outsider with access to
# rank 0's memfd (same user) truncates it. Unsealed, the next touch of the mapping would kill
# the ranks with SIGBUS; sealed against shrinking, the truncation is refused (EPERM) and the
# ranks finish with right sums.
# Usage: truncate_segment.sh BINARY
set -u
bin=$1
tmp=$(mktemp -d)
pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for r in 0 1; do
  DISTRUN_TRANSPORT=shm RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout -k 5 100 "$bin" 100000000 16 5000 "$tmp/stop" >"$tmp/out$r" 2>"$tmp/err$r" &
  pids+=($!)
done
# A limit, not a pause: 60 s for two ranks to join on a loaded machine.
for _ in $(seq 1200); do
  [[ $(cat "$tmp"/out* 2>/dev/null | grep -c "first all_reduce done") == 2 ]] && break
  sleep 0.05
done
fail=0
# timeout runs the rank as its child: find the rank's process and its memfd.
# The ranks loop until this script has tried the truncation, then run up to 100 more
# all_reduces over the mapping and stop: their work scales with the machine's speed (a fixed
# count that outlasts the truncation quietly, 0.6 s, takes a minute beside four busy loops).
rank0=$(pgrep -P "${pids[0]}" | head -n 1)
segment=""
for fd in /proc/"$rank0"/fd/*; do
  [[ $(readlink "$fd") == "/memfd:distrun-cma"* ]] && segment=$fd
done
if [[ -z $segment ]]; then
  echo "FAIL: no shared segment found in rank 0 (process $rank0): $(cat "$tmp"/out* "$tmp"/err*)"
  exit 1
fi
if /usr/bin/python3 -c 'import os, sys; os.truncate(sys.argv[1], 0)' "$segment" 2>"$tmp/truncate"; then
  echo "FAIL: the segment could be truncated"; fail=1
else
  grep -q "PermissionError\|Operation not permitted" "$tmp/truncate" || { echo "FAIL: unexpected: $(cat "$tmp/truncate")"; fail=1; }
  echo "truncation refused: $(tail -n 1 "$tmp/truncate")"
fi
touch "$tmp/stop"
for r in 0 1; do
  wait "${pids[$r]}"; rc=$?
  echo "rank $r exited $rc: $(tr '\n' ' ' <"$tmp/out$r") $(tail -n 1 "$tmp/err$r")"
  [[ $rc == 0 ]] || { echo "FAIL: rank $r should finish (exit $rc; 135 is SIGBUS)"; fail=1; }
  grep -q "rank $r: transport shm" "$tmp/out$r" || { echo "FAIL: rank $r did not use the shared segment"; fail=1; }
  grep -q "rank $r: ok 3" "$tmp/out$r" || { echo "FAIL: rank $r's sums are wrong"; fail=1; }
done
exit $fail

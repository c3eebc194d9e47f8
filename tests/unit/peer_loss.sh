#!/usr/bin/env bash
# Kills (mode kill: SIGKILL) or freezes (mode stop: SIGSTOP) one of 4 processes in the middle
# of an all_reduce loop: the other three must fail with an error naming the lost peer (rank 2)
# within their timeout, and none may hang.
# Usage: peer_loss.sh BINARY kill|stop
set -u
bin=$1
mode=${2:-kill}
signal=$([[ $mode == stop ]] && echo -STOP || echo -9)
tmp=$(mktemp -d)
pids=()
cleanup() { kill -9 "${pids[@]}" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
timeout_ms=4000
for r in 0 1 2 3; do
  RANK=$r WORLD_SIZE=4 LOCAL_RANK=$r LOCAL_WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$bin" 1000000 262144 $timeout_ms >"$tmp/out$r" 2>"$tmp/err$r" &
  pids+=($!)
done
# Wait until every rank has finished one all_reduce, so the kill lands mid-loop. A limit, not a
# pause: 60 s, so that four ranks started beside other busy processes have time to join.
for _ in $(seq 600); do
  [[ $(cat "$tmp"/out* 2>/dev/null | grep -c "first all_reduce done") == 4 ]] && break
  sleep 0.1
done
[[ $(cat "$tmp"/out* | grep -c "first all_reduce done") == 4 ]] || { echo "FAIL: ranks did not start"; cat "$tmp"/err*; exit 1; }
kill $signal "${pids[2]}"
start=$(date +%s.%N)
fail=0
for r in 0 1 3; do
  # Bounded wait: timeout (4 s) + heartbeat probe + generous slack for a loaded machine.
  for _ in $(seq 150); do kill -0 "${pids[$r]}" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "${pids[$r]}" 2>/dev/null; then echo "FAIL: rank $r still running 15 s after the kill"; fail=1; continue; fi
  wait "${pids[$r]}"; rc=$?
  echo "rank $r exited $rc: $(tail -n 1 "$tmp/err$r")"
  [[ $rc == 1 ]] || { echo "FAIL: rank $r should exit 1"; fail=1; }
  grep -q "lost peer rank 2" "$tmp/err$r" || { echo "FAIL: rank $r's error does not name rank 2"; fail=1; }
done
echo "all survivors reported within $(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo '?') s"
exit $fail

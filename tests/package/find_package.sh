#!/usr/bin/env bash
# Installs distrun from BUILD_DIR into a temporary prefix, builds tests/package/consumer
# against it with find_package(distrun), and runs it on 4 processes: each must print sum 10.
# Usage: find_package.sh BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
pids=()
trap 'kill -9 "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$here/consumer" -B "$tmp/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/build" >/dev/null
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for r in 0 1 2 3; do
  RANK=$r WORLD_SIZE=4 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 60 "$tmp/build/consumer" >"$tmp/out$r" &
  pids+=($!)
done
fail=0
for r in 0 1 2 3; do wait "${pids[$r]}" || { echo "FAIL: rank $r exited $?"; fail=1; }; done
cat "$tmp"/out*
for r in 0 1 2 3; do grep -qx "rank $r sum 10" "$tmp/out$r" || { echo "FAIL: rank $r did not print sum 10"; fail=1; }; done
exit $fail

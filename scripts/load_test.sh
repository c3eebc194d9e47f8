#!/usr/bin/env bash
# Runs the suite on shared cores: scripts/test.sh with its arguments beside BUSY busy loops
# (`while :; do :; done`, default 4), as a training host with data loaders and other jobs is
# shared. The loops are killed when the suite ends, however it ends; the suite's status is
# this script's. With --ctest BUILD_DIR it runs `ctest` there with the arguments instead
# (a subset of an existing build, e.g. -R 'shared memory|truncating').
# Usage: scripts/load_test.sh [--busy N] [--ctest BUILD_DIR] [arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
busy=4
ctest_dir=""
while (($#)); do
  case "$1" in
    --busy) busy=$2; shift 2 ;;
    --ctest) ctest_dir=$(cd "$2" && pwd); shift 2 ;;
    -h | --help) sed -n '2,7p' "$0"; exit 0 ;;
    *) break ;;
  esac
done
loops=()
trap '((${#loops[@]})) && kill "${loops[@]}" 2>/dev/null' EXIT
for ((i = 0; i < busy; i++)); do
  sh -c 'while :; do :; done' &
  loops+=($!)
done
echo "load_test.sh: $busy busy loops beside the tests (load average $(cut -d' ' -f1-3 /proc/loadavg))" >&2
if [[ -n $ctest_dir ]]; then
  cd "$ctest_dir" && ctest --output-on-failure "$@"
else
  "$root/scripts/test.sh" "$@"
fi

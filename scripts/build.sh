#!/usr/bin/env bash
# Configures (once) and builds distrun into build/ (Release), rebuilding only what is stale.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
if [[ ! -f $dir/CMakeCache.txt || $# -gt 0 ]]; then
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log" >&2; exit 1; }
  grep -A8 "distrun .* configuration" "$dir.configure.log" >&2 || true
fi
cmake --build "$dir" -j"$(nproc)"  -- --no-print-directory >"$dir.build.log" 2>&1 ||
  { grep -E "error|Error" -A5 "$dir.build.log" | head -80 >&2; echo "distrun: build failed (log: $dir.build.log)" >&2; exit 1; }

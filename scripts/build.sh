#!/usr/bin/env bash
# Configures (once) and builds distrun into build/ (Release), rebuilding only what is stale.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake -D options...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/build}
shift || true
mkdir -p "$dir"
# ccache (a build dependency) keeps compiled objects across build folders and clones: paths under
# the checkout are hashed relative to it, so a fresh clone, build-asan/ after build/, or a second
# worktree recompiles only what differs. CCACHE_DISABLE=1 turns it off.
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache} CMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER:-ccache}
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
fi
if [[ ! -f $dir/CMakeCache.txt || $# -gt 0 ]]; then
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >"$dir/distrun-configure.log" 2>&1 ||
    { cat "$dir/distrun-configure.log" >&2; exit 1; }
  grep -A8 "distrun .* configuration" "$dir/distrun-configure.log" >&2 || true
fi
cmake --build "$dir" -j"$(nproc)"  -- --no-print-directory >"$dir/distrun-build.log" 2>&1 ||
  { grep -E "error|Error" -A5 "$dir/distrun-build.log" | head -80 >&2; echo "distrun: build failed (log: $dir/distrun-build.log)" >&2; exit 1; }

#!/usr/bin/env bash
# Installs what is missing (including what the tests start for real: SLURM, munge, Open MPI,
# PyTorch), builds, and runs the whole suite through ctest.
# Usage: scripts/test.sh [--sanitize] [ctest arguments...]
#   --sanitize: a separate ASan+UBSan build in build-asan/, running the unit and multi-process
#               tests (DISTRUN_SANITIZE can name other sanitizers, e.g. thread).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$root/build
cmake_args=()
if [[ ${1:-} == --sanitize ]]; then
  shift
  dir=$root/build-asan
  cmake_args=(-DDISTRUN_SANITIZE="${DISTRUN_SANITIZE:-address,undefined}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Tests labelled no-sanitize cannot run in this build (they say why in their CMakeLists.txt).
  set -- -LE no-sanitize "$@"
fi
"$root/scripts/deps.sh" test
"$root/scripts/build.sh" "$dir" "${cmake_args[@]}"
cd "$dir"
ctest --output-on-failure --timeout 600 -j2 "$@"

#!/usr/bin/env bash
# Installs what is missing (including what the tests start for real: SLURM, munge, Open MPI,
# PyTorch, clang), builds, and runs the whole suite through ctest.
# Usage: scripts/test.sh [--sanitize] [ctest arguments...]
#   (none)      the Release build in build/ and every test. Under CI (CI=true) the ASan+UBSan
#               pass below follows, so CI runs both.
#   --sanitize  only the ASan+UBSan build in build-asan/, running every test not labelled
#               no-sanitize (DISTRUN_SANITIZE can name other sanitizers, e.g. thread).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# run_suite BUILD_DIR "CMAKE_ARGS..." CTEST_ARGS...
run_suite() {
  local dir=$1 cmake_args=$2
  shift 2
  # shellcheck disable=SC2086 # cmake_args is a word list on purpose
  "$root/scripts/build.sh" "$dir" $cmake_args
  local status=0
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j2 "$@") 2>&1 | tee "$dir/ctest-console.log" || status=$?
  # A failure's output scrolls by mid-run; repeat it last, where a log's tail keeps it.
  ((status == 0)) || /usr/bin/python3 "$root/scripts/print_failures.py" "$dir/ctest-console.log" || true
  return $status
}

sanitized() {
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Tests labelled no-sanitize cannot run in this build (their CMakeLists.txt says why).
  run_suite "$root/build-asan" \
    "-DDISTRUN_SANITIZE=${DISTRUN_SANITIZE:-address,undefined} -DCMAKE_BUILD_TYPE=RelWithDebInfo" -LE no-sanitize "$@"
}

"$root/scripts/deps.sh" test
if [[ ${1:-} == --sanitize ]]; then
  shift
  sanitized "$@"
  exit 0
fi
run_suite "$root/build" "" "$@"
if [[ ${CI:-} == true && $# == 0 ]]; then
  echo "distrun: CI also runs the suite under ASan+UBSan (build-asan/)"
  sanitized
fi

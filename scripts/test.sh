#!/usr/bin/env bash
# The test suite in stages, each installing only what it needs (scripts/deps.sh LEVEL) and each
# runnable alone. Every test carries exactly one stage label (tests/label_check.py checks it).
# Usage: scripts/test.sh [STAGE] [ctest arguments...]
#   lint         clang-format over the whole tree, clang-tidy on the files changed against the
#                base (scripts/lint.sh; DISTRUN_LINT_BASE overrides the base), and the linter's
#                own tests (stage.lint)
#   build        the Release build in build/
#   unit         build, then the tests that need only the build's dependencies (stage.unit)
#   integration  build, then the tests that start SLURM, Open MPI, PyTorch, namespaces, the fuzzer
#                or the packaging tools (stage.integration)
#   sanitizers   the ASan+UBSan build in build-asan/, then the unit and integration tests not
#                labelled no-sanitize (DISTRUN_SANITIZE can name other sanitizers, e.g. thread)
#   all          every stage above, in that order (what .ci/run runs)
#   (none)       lint, build, unit and integration; under CI (CI=true) sanitizers too
#   --sanitize   the sanitizers stage (its older spelling)
#   ctest arguments alone (e.g. -L launcher): the Release build, then ctest with them
# Each stage prints its wall time when it ends.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

# run_ctest BUILD_DIR CTEST_ARGS...
run_ctest() {
  local dir=$1 status=0
  shift
  (cd "$dir" && ctest --output-on-failure --timeout 600 -j2 "$@") 2>&1 | tee "$dir/ctest-console.log" || status=$?
  # A failure's output scrolls by mid-run; repeat it last, where a log's tail keeps it.
  ((status == 0)) || /usr/bin/python3 "$root/scripts/print_failures.py" "$dir/ctest-console.log" || true
  return $status
}

# Each stage chains its steps with && (a stage runs inside `if`, where set -e does not hold).
stage_lint() {
  "$root/scripts/deps.sh" lint || return
  # clang-tidy needs compile_commands.json: configuring is enough, nothing is compiled.
  if [[ ! -f $root/build/compile_commands.json ]]; then
    mkdir -p "$root/build"
    cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >"$root/build/distrun-configure.log" 2>&1 ||
      { cat "$root/build/distrun-configure.log" >&2; return 1; }
  fi
  local status=0
  "$root/scripts/lint.sh" || status=$?
  run_ctest "$root/build" -L '^stage\.lint$' "$@" || status=$?
  return $status
}
stage_build() {
  "$root/scripts/deps.sh" build && "$root/scripts/build.sh"
}
stage_unit() {
  "$root/scripts/deps.sh" unit && "$root/scripts/build.sh" && run_ctest "$root/build" -L '^stage\.unit$' "$@"
}
stage_integration() {
  "$root/scripts/deps.sh" test && "$root/scripts/build.sh" &&
    run_ctest "$root/build" -L '^stage\.integration$' "$@"
}
stage_sanitizers() {
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
  # Tests labelled no-sanitize cannot run in this build, or add nothing in it (their
  # CMakeLists.txt says which). -O1 with line tables only (-g1): what ASan's reports need, and a
  # cheaper compile than RelWithDebInfo's -O2 -g, within CI's time.
  "$root/scripts/deps.sh" test &&
    "$root/scripts/build.sh" "$root/build-asan" \
      "-DDISTRUN_SANITIZE=${DISTRUN_SANITIZE:-address,undefined}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" &&
    run_ctest "$root/build-asan" -L '^stage\.(unit|integration)$' -LE no-sanitize "$@"
}

# stages NAME... : runs each, timing it; goes on after a failed stage and fails at the end.
stages() {
  local failed=() times=() start=$SECONDS t
  for s in "$@"; do
    t=$SECONDS
    echo "distrun: stage $s"
    if "stage_$s"; then
      echo "distrun: stage $s passed in $((SECONDS - t)) s"
      times+=("$s $((SECONDS - t)) s")
    else
      echo "distrun: stage $s FAILED after $((SECONDS - t)) s"
      times+=("$s FAILED $((SECONDS - t)) s")
      failed+=("$s")
    fi
  done
  local IFS=,
  echo "distrun: stages ${times[*]}; $((SECONDS - start)) s in all"
  ((${#failed[@]} == 0)) || { echo "distrun: failed stages: ${failed[*]}"; return 1; }
}

case ${1:-} in
  lint | build | unit | integration | sanitizers)
    s=$1
    shift
    start=$SECONDS
    "stage_$s" "$@" || { echo "distrun: stage $s FAILED after $((SECONDS - start)) s"; exit 1; }
    echo "distrun: stage $s passed in $((SECONDS - start)) s"
    ;;
  --sanitize) shift; stage_sanitizers "$@" ;;
  all) stages lint build unit integration sanitizers ;;
  "")
    if [[ ${CI:-} == true ]]; then stages lint build unit integration sanitizers; else stages lint build unit integration; fi
    ;;
  -*)
    "$root/scripts/deps.sh" test
    "$root/scripts/build.sh"
    run_ctest "$root/build" "$@"
    ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac

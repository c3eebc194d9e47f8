#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (once per build dir) and runs one of them for a
# bounded time from its corpus (a copy: the checked-in corpus is not modified).
# Usage: run_fuzz.sh FUZZ_BUILD_DIR build
#        run_fuzz.sh FUZZ_BUILD_DIR run TARGET SECONDS
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$1
action=$2
if [[ $action == build ]]; then
  probe=$(mktemp -d)
  echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' >"$probe/p.cpp"
  if ! clang++ -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" >/dev/null 2>&1; then
    rm -rf "$probe"
    echo "SKIP: clang++ with libFuzzer (Debian's clang and libclang-rt-14-dev) is not installed"
    exit 77
  fi
  rm -rf "$probe"
  # ccache, as scripts/build.sh uses it: a second run of the suite recompiles only what changed.
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(cd "$here/../.." && pwd)}
  cmake -S "$here/project" -B "$dir" "${launcher[@]}" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.log" 2>&1 ||
    { cat "$dir.log"; exit 1; }
  cmake --build "$dir" -j"$(nproc)" >>"$dir.log" 2>&1 || { grep -E "error" -A5 "$dir.log" | head -60; exit 1; }
  echo "fuzz targets built in $dir"
  exit 0
fi
target=$3
seconds=$4
bin=$dir/fuzz_$target
[[ -x $bin ]] || { echo "SKIP: $bin was not built (see the fuzz build test)"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r "$here/corpus/$target/." "$work/" 2>/dev/null || true
# -rss_limit_mb and -timeout turn memory blow-ups and hangs into failures; leaks fail via ASan.
# -error_exitcode=1: libFuzzer exits 77 on a crash by default, which ctest reads as SKIP.
cd "$work"
# (set +e: under pipefail a failing fuzzer would end the script here, before its artifact is shown)
set +e
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -error_exitcode=1 -print_final_stats=1 \
  -artifact_prefix="$work/" "$work" 2>&1 | tail -n 25
status=${PIPESTATUS[0]}
set -e
if ((status != 0)); then
  for a in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-*; do
    [[ -e $a ]] || continue
    mkdir -p "$dir/artifacts" && cp "$a" "$dir/artifacts/"  # kept to reproduce: $bin FILE
    echo "artifact: $dir/artifacts/$(basename "$a")"
    od -c "$a" | head -20 || true
  done
fi
exit "$status"

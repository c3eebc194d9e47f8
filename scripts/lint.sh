#!/usr/bin/env bash
# The lint stage: every tracked C/C++ file formatted as .clang-format says, and clang-tidy's
# checks (.clang-tidy) on the C++ files changed since the base, through the build's
# compile_commands.json (a configured build is enough: nothing needs to be compiled).
# Usage: scripts/lint.sh [--fix] [--base REF] [--build DIR] [--root DIR]
#   --fix    reformat the files in place instead of failing (clang-tidy findings stay errors)
#   --base   what "changed" is measured against (default $DISTRUN_LINT_BASE, else the merge
#            base of HEAD with origin/main, else with main; with none, every file is tidied)
#   --build  the build folder holding compile_commands.json (default ROOT/build)
#   --root   the git work tree to lint (default this repository; the lint test points it at a
#            scratch repository)
# Exit status: 0 clean, 1 a format violation or a tidy finding, 2 bad usage or missing tools.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fix=false base=${DISTRUN_LINT_BASE:-} build=""
while (($#)); do
  case $1 in
    --fix) fix=true ;;
    --base) base=${2:?--base needs a ref}; shift ;;
    --build) build=${2:?--build needs a folder}; shift ;;
    --root) root=$(cd "${2:?--root needs a folder}" && pwd); shift ;;
    *) echo "usage: $0 [--fix] [--base REF] [--build DIR] [--root DIR]" >&2; exit 2 ;;
  esac
  shift
done
build=${build:-$root/build}
for tool in clang-format clang-tidy; do
  command -v $tool >/dev/null || { echo "lint: $tool is missing (scripts/deps.sh lint installs it)" >&2; exit 2; }
done
cd "$root"
sources=(':(glob)**/*.cpp' ':(glob)**/*.hpp' ':(glob)**/*.c' ':(glob)**/*.h')
status=0

# Format: the whole tree, tracked and new files alike.
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- "${sources[@]}")
if $fix; then
  ((${#files[@]} == 0)) || clang-format -i "${files[@]}"
  echo "lint: formatted ${#files[@]} files"
elif ((${#files[@]})); then
  if ! clang-format --dry-run -Werror "${files[@]}"; then
    echo "lint: FAIL: files above differ from .clang-format (scripts/lint.sh --fix rewrites them)" >&2
    status=1
  fi
fi

# Tidy: the C++ sources changed against the base that the build compiles.
if [[ -z $base ]]; then
  for ref in origin/main main; do
    if git rev-parse -q --verify "$ref^{commit}" >/dev/null && base=$(git merge-base HEAD "$ref"); then break; fi
    base=""
  done
fi
if [[ -n $base ]]; then
  mapfile -t changed < <({ git diff --name-only --diff-filter=d "$base" -- '*.cpp' '*.c'
                           git ls-files --others --exclude-standard -- '*.cpp' '*.c'; } | sort -u)
else
  mapfile -t changed < <(git ls-files -- '*.cpp' '*.c')
fi
if ((${#changed[@]})); then
  [[ -f $build/compile_commands.json ]] ||
    { echo "lint: $build/compile_commands.json is missing: configure first (scripts/build.sh)" >&2; exit 2; }
  # Only files the build compiles have flags to be tidied with (not the fuzz targets or bench probes).
  mapfile -t tidy < <(/usr/bin/python3 - "$build/compile_commands.json" "$root" "${changed[@]}" <<'EOF'
import json, os, sys
db, root, files = sys.argv[1], sys.argv[2], sys.argv[3:]
known = {os.path.realpath(os.path.join(e["directory"], e["file"])) for e in json.load(open(db))}
for f in files:
    print(f) if os.path.realpath(os.path.join(root, f)) in known else print(f"lint: not in the build, not tidied: {f}", file=sys.stderr)
EOF
  )
  if ((${#tidy[@]})); then
    echo "lint: clang-tidy on ${#tidy[@]} changed files (against ${base:-nothing})"
    if ! printf '%s\0' "${tidy[@]}" | xargs -0 -n1 -P"$(nproc)" clang-tidy -p "$build" --quiet; then
      echo "lint: FAIL: clang-tidy findings above (.clang-tidy lists the checks)" >&2
      status=1
    fi
  fi
fi
((status == 0)) && echo "lint: PASS"
exit $status

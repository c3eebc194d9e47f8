#!/usr/bin/env bash
# Builds the Debian package with cpack, unpacks it into a scratch root (dpkg -x) and runs a
# scenario on 4 ranks with the installed distrun and distrun-worker only, as on a host without
# CUDA (hide_cuda.sh; the folders CUDA was found in at build time are given after SOURCE_DIR),
# where `--device cuda` must exit 2 saying what is missing; checks that the package's
# dependencies name neither CUDA nor NCCL, and that the man pages, bash completion, library and
# CMake config are in it. Usage: deb_test.sh BUILD_DIR SOURCE_DIR [CUDA_LIBRARY_DIR...]
set -euo pipefail
build=$1
src=$2
shift 2
hide=("$(cd "$(dirname "$0")" && pwd)/hide_cuda.sh")
for d in "$@"; do hide+=(-d "$d"); done
for tool in cpack dpkg-deb; do
  command -v $tool >/dev/null || { echo "SKIP: $tool not installed"; exit 77; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

(cd "$build" && cpack -G DEB -B "$tmp/out" >"$tmp/cpack.log" 2>&1) || { cat "$tmp/cpack.log"; fail "cpack -G DEB"; }
deb=$(ls "$tmp"/out/distrun_*.deb)
dpkg-deb -I "$deb" >"$tmp/info"
grep -q "^ Package: distrun$" "$tmp/info" || fail "package name"
grep -q "^ Depends: .*libgloo0" "$tmp/info" || fail "Depends from dpkg-shlibdeps: $(cat "$tmp/info")"
# CUDA and NCCL are loaded when asked for, never required: the package installs without them.
if grep -Ei "^ (Depends|Pre-Depends|Recommends):.*(cuda|nccl)" "$tmp/info"; then fail "the package requires CUDA or NCCL"; fi
dpkg -x "$deb" "$tmp/root"
root=$tmp/root/usr
for f in bin/distrun bin/distrun-worker libexec/distrun/distrun-shim share/bash-completion/completions/distrun \
         share/man/man1/distrun.1.gz share/man/man1/distrun-worker.1.gz share/man/man1/distrun-bench.1.gz \
         include/distrun/comm/process_group.hpp; do
  [[ -e $root/$f ]] || fail "$f missing from the package"
done
ls "$root"/lib*/libdistrun.so.0 "$root"/lib*/cmake/distrun/distrunConfig.cmake >/dev/null || fail "library or CMake config missing"
# The man page is distrun's --help, torchrun's options included. (Outputs are captured before
# grep reads them: under pipefail, `producer | grep -q` fails whenever grep's early exit makes
# the producer's next write die of SIGPIPE, which a busy machine hits often with ldd.)
man=$(zcat "$root/share/man/man1/distrun.1.gz")
grep -q -- "nproc\\\\-per\\\\-node" <<<"$man" || fail "man page lacks --nproc-per-node"
grep -q -- "rdzv\\\\-conf" <<<"$man" || fail "man page lacks --rdzv-conf"
synopsis=$(sed -n '/^\.SH SYNOPSIS/,/^\.SH DESCRIPTION/p' <<<"$man")
grep -q "PROGRAM" <<<"$synopsis" || fail "the man page's synopsis lacks PROGRAM: $synopsis"
# Bash completion offers the installed binary's options.
words=$(PATH="$root/bin:$PATH" bash -c 'source "$1"; COMP_WORDS=(distrun --rdzv-e); COMP_CWORD=1; _distrun; echo "${COMPREPLY[@]}"' _ \
        "$root/share/bash-completion/completions/distrun")
[[ $words == "--rdzv-endpoint" ]] || fail "bash completion of --rdzv-e gave '$words'"
# The installed binaries, nothing from the build tree: the scenario runs on 4 ranks.
libs=$(ldd "$root/bin/distrun-worker")
grep -q "=> $tmp/root/usr/.*libdistrun" <<<"$libs" || fail "distrun-worker does not load the packaged library: $(grep distrun <<<"$libs")"
# With CUDA hidden where a mount namespace can be made, else as the host is.
run=("${hide[@]}")
"${hide[@]}" true >/dev/null || { echo "note: CUDA cannot be hidden here; the package runs with it"; run=(); }
out=$(timeout 120 "${run[@]}" "$root/bin/distrun" "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1 </dev/null) ||
  fail "installed distrun: $out"
grep -q "Rank 3" <<<"$out" || fail "no result of rank 3: $out"
where="without CUDA"
if (( ${#run[@]} )); then
  rc=0
  out=$(timeout 60 "${run[@]}" "$root/bin/distrun" --device cuda "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1 </dev/null) || rc=$?
  [[ $rc == 2 ]] && grep -q "libcudart.so.*install the CUDA\|has no CUDA support" <<<"$out" ||
    fail "--device cuda without CUDA (exit $rc): $out"
else
  where="(CUDA not hidden)"
fi
echo "PASS: $(basename "$deb") installs and runs a 4-rank scenario $where"

#!/usr/bin/env bash
# Builds the Debian package with cpack, unpacks it into a scratch root (dpkg -x) and runs a
# scenario on 4 ranks with the installed distrun and distrun-worker only; checks the man pages,
# bash completion, library and CMake config are in it. Usage: deb_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
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
out=$(timeout 120 "$root/bin/distrun" "$src/tests/launcher/data/all_reduce_4.yaml" 2>&1) || fail "installed distrun: $out"
grep -q "Rank 3" <<<"$out" || fail "no result of rank 3: $out"
echo "PASS: $(basename "$deb") installs and runs a 4-rank scenario"

#!/usr/bin/env bash
# Installs what distrun needs from Debian 12's archive, and only what is missing.
# Usage: scripts/deps.sh [build|test|bench]   (default: build)
#   build: compiler, CMake and the libraries the build links
#   test:  build + what the tests start for real (SLURM, munge, Open MPI, PyTorch, iproute2, clang)
#          and matplotlib, so the suite draws with scripts/bench/plot.py instead of skipping it
#   bench: test + the timing tools the benchmark scripts compare with
set -euo pipefail
level=${1:-build}

build_pkgs=(build-essential cmake pkg-config libcli11-dev libgloo-dev libspdlog-dev libyaml-cpp-dev libyaml-dev help2man
  catch2 libmuparser-dev nlohmann-json3-dev libasio-dev libssl-dev)
test_pkgs=(slurm-wlm munge openmpi-bin libopenmpi-dev python3 python3-yaml python3-jsonschema python3-torch iproute2 procps psmisc
  clang libclang-rt-14-dev file dpkg-dev python3-matplotlib)
bench_pkgs=(hyperfine valgrind)

pkgs=("${build_pkgs[@]}")
case "$level" in
  build) ;;
  test) pkgs+=("${test_pkgs[@]}") ;;
  bench) pkgs+=("${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: $0 [build|test|bench]" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) == "install ok installed" ]] || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

echo "distrun: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) != 0 ]]; then
  command -v sudo >/dev/null || { echo "distrun: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

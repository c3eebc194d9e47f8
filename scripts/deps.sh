#!/usr/bin/env bash
# Installs what distrun needs from Debian 12's archive, and only what is missing.
# Usage: scripts/deps.sh [build|lint|unit|test|integration|all|bench]   (default: build)
#   build: compiler, CMake and the libraries the build links
#   lint:  build + clang-format, clang-tidy and git (the lint stage of scripts/test.sh)
#   unit:  build + python3, which drives the unit stage's processes
#   test (or integration): unit + what the tests start for real (SLURM, munge, Open MPI,
#          PyTorch, iproute2, etcd, clang for the fuzzer, the packaging tools) and matplotlib, so the
#          suite draws with scripts/bench/plot.py instead of skipping it
#   all:   lint + test, every stage
#   bench: test + the timing tools the benchmark scripts compare with
set -euo pipefail
level=${1:-build}

build_pkgs=(build-essential ccache cmake pkg-config libcli11-dev libgloo-dev libspdlog-dev libyaml-dev help2man
  catch2 libmuparser-dev nlohmann-json3-dev libasio-dev libssl-dev libcurl4-openssl-dev)
lint_pkgs=(clang-format clang-tidy git python3)
unit_pkgs=(python3 procps)
test_pkgs=(slurm-wlm munge openmpi-bin libopenmpi-dev python3-yaml python3-jsonschema python3-torch iproute2 psmisc
  clang libclang-rt-14-dev file dpkg-dev python3-matplotlib etcd-server curl openssl)
bench_pkgs=(hyperfine valgrind)

pkgs=("${build_pkgs[@]}")
case "$level" in
  build) ;;
  lint) pkgs+=("${lint_pkgs[@]}") ;;
  unit) pkgs+=("${unit_pkgs[@]}") ;;
  test | integration) pkgs+=("${unit_pkgs[@]}" "${test_pkgs[@]}") ;;
  all) pkgs+=("${lint_pkgs[@]}" "${unit_pkgs[@]}" "${test_pkgs[@]}") ;;
  bench) pkgs+=("${unit_pkgs[@]}" "${test_pkgs[@]}" "${bench_pkgs[@]}") ;;
  *) echo "usage: $0 [build|lint|unit|test|integration|all|bench]" >&2; exit 2 ;;
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

#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running job: installs what is missing,
# builds (Release) when stale, then runs build/bin/distrun with the given arguments, or the
# demo scenario on 4 ranks when there are none.
# Usage: scripts/run.sh [distrun arguments...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/deps.sh" build
"$root/scripts/build.sh"
if (($# == 0)); then
  set -- --nproc-per-node 4 "$root/configs/demo.yaml"
fi
exec "$root/build/bin/distrun" "$@"

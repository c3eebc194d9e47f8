#!/usr/bin/env bash
# Between hosts: distrun's TCP path against torch.distributed (gloo) and Open MPI between
# network-namespace hosts (hosts.py, as root), in the placements 2 hosts x 1 rank, 4 x 1 and
# 2 x 2, each quiet and beside four busy loops: p50 of 8 B..64 KiB all_reduce, all_gather,
# broadcast and send_recv against torch and the kernel's 8-byte TCP round trip; busbw of 1, 4,
# 16 and 64 MiB all_reduce, all_gather, reduce_scatter, all_to_all and broadcast against torch
# and two raw-TCP limits: one pair of hosts alone, and the raw ring (every rank at once, each
# sending to the next and receiving from the previous). Open MPI (TCP between the namespaces) in the quiet runs: beside
# busy loops its yielding ranks take 10 to 65 ms a small call and double the run's time
# (`hosts.py --busy 4` measures it; each busy placement's tables say why its column is empty).
# Every placement's repetitions interleave the systems; medians of them. On 2 cores 8 minutes
# at load average 2-6, 28 at 15-28 (--quick: 1 to 5).
# Prints, and writes to OUT/hosts.md, the summary (one row per placement) and each placement's
# tables (hosts_table.py), the busbw plot to OUT/hosts_busbw.png; OUT/hosts.jsonl: every row.
#
# Usage: scripts/bench/compare.sh --hosts [--build DIR] [--out DIR] [--reps N] [--iters N] [--quick] [--docs]
#   --build DIR  distrun's build folder (default: build/; built by scripts/build.sh when missing)
#   --out DIR    where results go (default: BUILD/compare)
#   --reps N     interleaved repetitions of every placement (default 3)
#   --iters N    timed calls per latency point (default 100; busbw: a fifth at 1 and 4 MiB, a 30th, at
#                least 3, at 16 and 64 MiB)
#   --quick      2 hosts x 1 rank only, quiet and busy, one repetition
#   --docs       also replace docs/performance.md's between-hosts figures (between its
#                <!-- hosts:begin --> and <!-- hosts:end --> lines) and docs/img/hosts_busbw.png
#   --hosts-baseline DIR      another build's distrun-bench in the same runs (a change against
#                             main's build, each measured beside the other)
#   --hosts-baseline-env K=V  this build (or DIR's) once more with K=V in the same runs (e.g.
#                             DISTRUN_TCP=gloo: the TCP path over Gloo's pairs), as the baseline
# Exits 77 without root or `ip netns`. Interrupted (Ctrl-C, SIGTERM), it ends what it started and
# removes its namespaces.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/bench
build=$root/build
out=""
reps=3
iters=100
docs=0
configs=("2 1 0" "2 1 4" "4 1 0" "4 1 4" "2 2 0" "2 2 4") # hosts, ranks per host, busy loops
extra=()
while (($#)); do
  case "$1" in
    --hosts) shift ;;
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --quick) reps=1; configs=("2 1 0" "2 1 4"); shift ;;
    --docs) docs=1; shift ;;
    --hosts-baseline) extra+=(--baseline "$(cd "$2" && pwd)"); shift 2 ;;
    --hosts-baseline-env) extra+=(--baseline-env "$2"); shift 2 ;;
    -h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "compare.sh --hosts: unknown argument $1 (see --hosts --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/compare}
py=/usr/bin/python3 # Debian's: torch and matplotlib live there, not in a pyenv python3
[[ $(id -u) == 0 ]] || { echo "compare.sh --hosts: skipped: needs root (network namespaces)" >&2; exit 77; }
[[ -x $build/bin/distrun-bench ]] || "$root/scripts/build.sh" "$build"
mkdir -p "$out"
rows=$out/hosts.jsonl
: >"$rows"

# hosts.py runs in the background so that a signal reaches this script's trap at once: the trap
# hands it on (hosts.py then ends its ranks and busy loops and removes its namespaces).
child=""
stop() {
  if [[ -n $child ]]; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  echo "compare.sh --hosts: interrupted; rows so far in $rows" >&2
  exit 130
}
trap stop INT TERM HUP

# Why Open MPI is left out beside busy loops, said under those placements' tables.
busy_mpi="beside busy loops its yielding ranks took 10-65 ms a small call and doubled the run's time;"
busy_mpi+=" hosts.py --busy N without --no-mpi measures it"
start=$(date +%s)
for config in "${configs[@]}"; do
  read -r nh per busy <<<"$config"
  mpi=()
  ((busy)) && mpi=(--no-mpi "$busy_mpi")
  echo "[compare --hosts $(($(date +%s) - start)) s] $nh hosts x $per rank(s), $busy busy loops, $reps repetitions" >&2
  timeout -k 10 1800 "$py" "$here/hosts.py" --build "$build" --hosts "$nh" --per-host "$per" --busy "$busy" \
    --reps "$reps" --iters "$iters" --jsonl "$rows" "${mpi[@]}" "${extra[@]}" >"$out/hosts-$nh-$per-$busy.md" &
  child=$!
  rc=0
  wait "$child" || rc=$?
  child=""
  ((rc == 77)) && { echo "compare.sh --hosts: skipped (needs root and ip netns)" >&2; exit 77; }
  ((rc == 0)) || { echo "compare.sh --hosts: hosts.py failed ($nh x $per, $busy busy loops; exit $rc)" >&2; exit 1; }
done
docs_args=()
((docs)) && docs_args=(--docs "$root/docs/performance.md")
"$py" "$here/hosts_table.py" "$rows" "${docs_args[@]}" >"$out/hosts.md"
"$py" "$here/plot.py" "$rows" "$out/hosts_busbw.png" --between-hosts \
  --title "busbw between namespace hosts, quiet (median of repetitions)" >&2
((docs)) && cp "$out/hosts_busbw.png" "$root/docs/img/hosts_busbw.png"
cat "$out/hosts.md"
echo "[compare --hosts] done in $(($(date +%s) - start)) s: $out/hosts.md, $out/hosts_busbw.png, rows in $rows" >&2

#!/usr/bin/env bash
# Collectives on shared cores: distrun (distrun-bench over the shared-memory path, launched by
# distrun, --cpu-bind auto) against Open MPI's shared-memory path (vader, mpi_bench.c, mpirun's
# default binding), quiet and beside BUSY busy loops (`while :; do :; done`, started and killed
# here, in the same session as the ranks), the systems interleaved in every block. all_reduce,
# broadcast and all_gather at 8 B, 512 B, 4 KiB and 64 KiB, 2 and 4 ranks. Each point is the
# mean time per call of the slowest rank (distrun-bench -a 3, as mpi_bench's MPI_MAX) over at
# least ITERS calls (default 20 000) whose run lasts at least MIN_MS (default 500 ms): the
# point runs 200 calls, then ITERS, then ten times more each time until one run lasts MIN_MS
# (at most 5 000 000 calls), and the last run is the point. 20 000 of Open MPI's 8 B calls last
# about one scheduler slice (a few ms), so whether a preemption landed in the run decided its
# mean, a hundredfold apart from run to run; a run of MIN_MS spans well over a hundred slices.
# A point whose calls cost milliseconds (4 ranks on 2 cores beside busy loops) runs fewer than
# ITERS: as many as fill MAX_S (default 5 s) at the mean of the run before, thousands of
# slices, where 20 000 would take minutes a point. distrun's p50 and
# p99 too. Each point runs REPS times (default 3), interleaved, and the table takes the median.
# all_reduce and broadcast in place, all_gather out of place (as mpi_bench calls them). With
# --base DIR, a second distrun (an installed prefix or a build folder) runs beside it when
# quiet: the figures before and after a change, in one run.
# Prints a Markdown table (contention_table.py), with the load average of each block: the
# figures are only comparable within one run.
# Target: loaded, distrun's mean <= 2x Open MPI's at every point; quiet, no worse than --base
# by more than 10%.
#
# Usage: scripts/bench/contention.sh [--build DIR] [--base DIR] [--out DIR] [--iters N]
#          [--min-ms MS] [--max-s S] [--ranks "2 4"] [--busy N] [--reps N] [--sizes "8 512 4K 64K"]
#          [--collectives "..."]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/scripts/bench
build=$root/build
base=""
out=""
iters=20000
min_ms=500
max_s=5
max_iters=5000000
ranks="2 4"
busy=4
reps=3
sizes="8 512 4K 64K"
colls="all_reduce broadcast all_gather"
while (($#)); do
  case "$1" in
    --build) build=$(cd "$2" && pwd); shift 2 ;;
    --base) base=$(cd "$2" && pwd); shift 2 ;;
    --out) out=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --min-ms) min_ms=$2; shift 2 ;;
    --max-s) max_s=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    --collectives) colls=$2; shift 2 ;;
    -h | --help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "contention.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
out=${out:-$build/contention}
mkdir -p "$out"
[[ -x $build/bin/distrun ]] || "$root/scripts/build.sh" "$build"
results=$out/contention.jsonl
: >"$results"
mpicc -O2 -o "$out/mpi_bench" "$here/mpi_bench.c"
mpi_root=()
[[ $(id -u) == 0 ]] && mpi_root=(--allow-run-as-root)
limit=1800 # seconds any one job may take: a hung job is an error, never a hang

loops=()
stop_loops() {
  ((${#loops[@]})) && kill "${loops[@]}" 2>/dev/null
  loops=()
}
trap stop_loops EXIT
start_loops() {
  for ((i = 0; i < busy; i++)); do
    sh -c 'while :; do :; done' &
    loops+=($!)
  done
}
load() { cut -d' ' -f1 /proc/loadavg; }
# One job of K calls of SIZE: its row (JSON: collective, bytes, mean_us, p50_us, p99_us).
distrun_row() { # PREFIX N COLL SIZE K
  local prefix=$1 n=$2 c=$3 s=$4 calls=$5 try
  # Up to three tries: distrun-bench binds MASTER_PORT itself, and on a shared host another
  # process may take the free port distrun picked before it does.
  for try in 1 2 3; do
    timeout -k 10 "$limit" "$prefix/bin/distrun" --nproc-per-node "$n" -- "$prefix/bin/distrun-bench" "$c" -b "$s" -e "$s" \
      -n "$calls" -w "$((calls / 20 + 10))" -a 3 -J "$out/bench.json" >/dev/null 2>"$out/bench.err" && break
    grep -q "port is already in use" "$out/bench.err" && ((try < 3)) || { cat "$out/bench.err" >&2; exit 1; }
  done
  /usr/bin/python3 - "$out/bench.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
place = "out_of_place" if doc["config"]["collective"] == "all_gather" else "in_place"
for r in doc["results"]:
    f = r[place]
    if f is not None:
        print(json.dumps({"collective": r["collective"], "bytes": r["size"], "mean_us": f["time"], "p50_us": f["p50_us"],
                          "p99_us": f["p99_us"]}))
PY
}
mpi_row() { # N COLL SIZE K
  timeout -k 10 "$limit" mpirun "${mpi_root[@]}" --oversubscribe --mca btl self,vader -np "$1" "$out/mpi_bench" \
    "$2" "$3" "$4" "$(($4 / 20 + 10))" | grep -o '{.*}' | sed 's/"time_us"/"mean_us"/'
}
# A point's row, its length sized by running it longer until it spans enough: 200 calls, then
# ITERS (or, when the 200 say that would take over MAX_S, what fills MAX_S), then ten times
# more each time until the calls of one run take MIN_MS (at most MAX_ITERS). Each step lasts at
# most ten times the one before it at the step before's mean, so a point whose first runs no
# preemption hit grows only until one does.
# Prints the row with its tags: SYSTEM LOADTAG REP N ROW_COMMAND...
sized_row() {
  local system=$1 tag=$2 rep=$3 n=$4 calls=200 next row
  shift 4
  while :; do
    row=$("$@" "$calls")
    next=$(/usr/bin/python3 -c '
import json, sys
row = json.loads(sys.argv[1])
calls, least, min_ms, max_s, most = map(float, sys.argv[2:])
mean = max(row["mean_us"], 1e-3)
if calls < least:
    nxt = min(least, max_s * 1e6 / mean)
    print(int(nxt) if nxt > calls else 0)
else:
    print(int(min(most, 10 * calls)) if calls * mean < min_ms * 1e3 and calls < most else 0)' "$row" "$calls" "$iters" "$min_ms" "$max_s" "$max_iters")
    ((next > 0)) || break
    calls=$next
  done
  /usr/bin/python3 -c '
import json, sys
row = json.loads(sys.argv[1])
row.update(system=sys.argv[2], load=sys.argv[3], rep=int(sys.argv[4]), world_size=int(sys.argv[5]), iters=int(sys.argv[6]),
           loadavg=float(sys.argv[7]))
print(json.dumps(row))' "$row" "$system" "$tag" "$rep" "$n" "$calls" "$(load)"
}
distrun_points() { # SYSTEM PREFIX N COLL LOADTAG REP
  local system=$1 prefix=$2 n=$3 c=$4 tag=$5 rep=$6 s
  for s in $sizes; do sized_row "$system" "$tag" "$rep" "$n" distrun_row "$prefix" "$n" "$c" "$s" >>"$results"; done
}
mpi_points() { # N COLL LOADTAG REP
  local n=$1 c=$2 tag=$3 rep=$4 s
  for s in $sizes; do sized_row mpi "$tag" "$rep" "$n" mpi_row "$n" "$c" "$s" >>"$results"; done
}

for ((rep = 1; rep <= reps; rep++)); do
  for n in $ranks; do
    for tag in quiet busy; do
      [[ $tag == busy ]] && start_loops
      echo "[contention] rep $rep, $n ranks, $tag (load average $(load))" >&2
      for c in $colls; do
        distrun_points distrun "$build" "$n" "$c" "$tag" "$rep"
        mpi_points "$n" "$c" "$tag" "$rep"
        # The build before a change only quiet: beside busy loops it may take milliseconds a call.
        [[ -n $base && $tag == quiet ]] && distrun_points distrun_base "$base" "$n" "$c" "$tag" "$rep"
      done
      stop_loops
    done
  done
done
/usr/bin/python3 "$here/contention_table.py" "$results"

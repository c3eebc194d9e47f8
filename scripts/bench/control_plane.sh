#!/usr/bin/env bash
# The store at scale: distrun's store server (authenticated) and torch's TCPStore (torch on
# /usr/bin/python3), interleaved at each client count, every client through the barrier ranks
# join with; one JSON line per run into OUT/control_plane.jsonl, the log-log plot into
# OUT/control_plane.png, and the verdict on the target (98 304 clients connected and through
# the barrier in 10 s, the server's peak RSS under 1 GB) at the largest count measured.
# Then the agents' rendezvous: node 0's against 1 024 agents, one JSON line per run into
# OUT/rendezvous.jsonl, and the verdict on its targets (a round in 5 s, the heartbeats under 5%
# of node 0's core, a dead agent told to every other within 2 s).
# Usage: scripts/bench/control_plane.sh [OUT_DIR] (default: a new temporary directory)
#   ROLES="store rendezvous"  which roles to run (default both)
#   AGENTS="1024"           the agent counts of the rendezvous role (the verdict: the largest)
#   COUNTS="1024 2048 ..."  the client counts (default: powers of two from 1 024 up to 98 304,
#                           and the most this machine's descriptor limit allows)
#   TORCH_MAX=16384         torch's largest count (its poll() server grows as N^2 beyond)
#   BUILD=build             where distrun-bench is
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bench=${BUILD:-$root/build}/bin/distrun-bench
out=${1:-$(mktemp -d /tmp/distrun-control-plane.XXXXXX)}
mkdir -p "$out"
results=$out/control_plane.jsonl
: >"$results"
# One process serves every client: its hard descriptor limit bounds the count (raising it
# needs CAP_SYS_RESOURCE; the bench raises its soft limit itself).
most=$(( $(ulimit -Hn) - 64 ))
counts=${COUNTS:-"1024 2048 4096 8192 16384 32768 65536 98304"}
if [[ -z ${COUNTS:-} ]] && (( most < 98304 )); then
  counts="$(for n in $counts; do if (( n < most )); then echo "$n"; fi; done) $most"
fi
roles=${ROLES:-store rendezvous}
status=0
if [[ " $roles " == *" store "* ]]; then
torch_max=${TORCH_MAX:-16384}
have_torch=0
/usr/bin/python3 -c "import torch.distributed" 2>/dev/null && have_torch=1
echo "distrun-control-plane: counts $counts; descriptor limit $(ulimit -Hn); results in $results" >&2
for n in $counts; do
  "$bench" control-plane --role store --clients "$n" -T 300 | tee -a "$results"
  if (( have_torch && n <= torch_max )); then
    "$bench" control-plane --role store --server torch --clients "$n" -T 300 | tee -a "$results" || true
  fi
done
/usr/bin/python3 "$root/scripts/bench/control_plane_plot.py" "$results" "$out/control_plane.png"
# The verdict, at the largest count distrun reached.
/usr/bin/python3 - "$results" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = max((r for r in rows if r["server"] == "distrun"), key=lambda r: r["clients"])
total = ours["connect_s"] + ours["barrier_s"]
ok = ours["clients"] >= 98304 and total <= 10 and ours["server_peak_rss_mb"] <= 1024
print(f"distrun-control-plane: {ours['clients']} clients: connect + barrier {total:.2f} s, "
      f"server peak RSS {ours['server_peak_rss_mb']:.0f} MB: target (98304 clients, 10 s, 1 GB) "
      + ("met" if ok else "NOT met"), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
fi
if [[ " $roles " == *" rendezvous "* ]]; then
  agents_results=$out/rendezvous.jsonl
  : >"$agents_results"
  for n in ${AGENTS:-1024}; do
    "$bench" control-plane --role rendezvous --clients "$n" -T 300 2>/dev/null | tee -a "$agents_results"
  done
  /usr/bin/python3 - "$agents_results" <<'PY' || status=1
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
r = max(rows, key=lambda r: r["clients"])
ok = r["round_s"] <= 5 and r["heartbeat_cpu_pct"] < 5 and r["failure_fanout_s"] <= 2
print(f"distrun-control-plane: {r['clients']} agents: round {r['round_s']:.2f} s, heartbeats "
      f"{r['heartbeat_cpu_pct']:.1f}% of node 0's core, fan-out {r['failure_fanout_s']:.2f} s: target "
      "(5 s, 5%, 2 s) " + ("met" if ok else "NOT met"), file=sys.stderr)
sys.exit(0 if ok else 1)
PY
fi
exit $status

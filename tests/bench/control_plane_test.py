"""distrun-bench control-plane as CI runs it: 4 096 authenticated clients against a real store
server through one barrier, and 128 agents through a round of node 0's real rendezvous, their
heartbeats and the fan-out of one agent's death; the JSON lines' fields checked, and their
times, CPU and the server's peak RSS under bounds generous enough for a loaded 2-core machine
(the full sizes, with the targets, run from scripts/bench/control_plane.sh). Bad input exits
2."""
import json
import resource

from bench_harness import BENCH, check, main, run, skip

CLIENTS = 4096
AGENTS = 128


def test_store():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < CLIENTS + 64:
        skip(f"the descriptor limit ({hard}) is below {CLIENTS + 64}")
    r = run([BENCH, "control-plane", "--role", "store", "--clients", str(CLIENTS), "-T", "100"], timeout=220)
    check(r.returncode == 0, f"rc {r.returncode}", r.stdout + r.stderr)
    line = json.loads(r.stdout.strip().splitlines()[-1])
    for key in ("role", "server", "clients", "connect_s", "barrier_s", "server_peak_rss_mb", "server_cpu_s"):
        check(key in line, f"no {key} in the JSON line", r.stdout)
    check(line["role"] == "store" and line["server"] == "distrun" and line["clients"] == CLIENTS, "wrong echo",
          r.stdout)
    check(0 < line["connect_s"] < 60 and 0 < line["barrier_s"] < 60, "too slow", r.stdout)
    check(0 < line["server_peak_rss_mb"] < 1024, "the server's peak RSS is out of bounds", r.stdout)
    check(line["server_cpu_s"] > 0, "the server used no CPU: it served nothing", r.stdout)


def test_rendezvous():
    r = run([BENCH, "control-plane", "--role", "rendezvous", "--clients", str(AGENTS), "--heartbeat-window", "2",
             "-T", "60"], timeout=150)
    check(r.returncode == 0, f"rc {r.returncode}", r.stdout + r.stderr)
    line = json.loads(r.stdout.strip().splitlines()[-1])
    for key in ("role", "clients", "connect_s", "round_s", "heartbeat_cpu_pct", "failure_fanout_s",
                "server_peak_rss_mb"):
        check(key in line, f"no {key} in the JSON line", r.stdout)
    check(line["role"] == "rendezvous" and line["clients"] == AGENTS, "wrong echo", r.stdout)
    check(0 < line["connect_s"] < 30 and 0 < line["round_s"] < 30, "too slow", r.stdout)
    # Every other agent told of the dead one within seconds, not at a heartbeat timeout (30 s).
    check(0 < line["failure_fanout_s"] < 10, "the failure fan-out is out of bounds", r.stdout)
    check(0 <= line["heartbeat_cpu_pct"] < 50, "node 0's heartbeat CPU is out of bounds", r.stdout)
    check(0 < line["server_peak_rss_mb"] < 512, "node 0's peak RSS is out of bounds", r.stdout)


def test_bad_input():
    for args in (["--clients", "0"], ["--role", "nothing"], ["--per-address", "0"],
                 ["--role", "rendezvous", "--clients", "0"], ["--role", "rendezvous", "--monitor-interval", "0"]):
        r = run([BENCH, "control-plane", *args], timeout=30)
        check(r.returncode == 2, f"{args}: rc {r.returncode}, expected 2", r.stdout + r.stderr)


if __name__ == "__main__":
    main({"store": test_store, "rendezvous": test_rendezvous, "bad_input": test_bad_input})

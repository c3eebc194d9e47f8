#!/usr/bin/python3
"""What checking a scenario costs as the world grows, this build next to the old:

  1. `distrun --check` of a 1 MiB all_reduce + reduce_scatter + all_to_all at N ranks
     (default 1024 and 4096): wall time, CPU time and peak RSS of the launcher's validation.
     Target: <= 2 s and <= 200 MB at 4096 ranks.
  2. `distrun --check` of S barrier steps (default 200 000) at 2 ranks, of a file of barrier
     steps at the scenario size bound (16 MiB, refused at the 1 000 000-node bound), and of the
     largest files of steps with arguments and of `values` (LONG_FILES: as many entries as the
     node bound lets a file of at most 16 MiB hold, among them steps that all differ by the names
     they use; each is made to be accepted but one that reads names no tensor has): what reading
     and checking a long file costs, in distrun and in `distrun-worker --check`. Target: each
     accepted or refused in <= 1 s of CPU and <= 64 MB peak RSS (asserted: exit 1 otherwise).
  3. A checked 4 MiB all_reduce run at M ranks (default 32) on this host: the largest peak RSS
     of one distrun-worker (peak_rss.py reads every worker's VmHWM). Target: <= 64 MB.

The old figures are measured with --baseline BUILD (a build of the code before the change, e.g.
main at 0c88d07) up to --baseline-max-ranks (the old check needs about 2 GB at 1024 ranks and
8 GB at 4096), and are otherwise the ones recorded below (RECORDED_OLD).

Usage: check_cost.py [--build DIR] [--baseline DIR] [--ranks N ...] [--steps S] [--worker-ranks M] [--label TEXT]
                     [--table] [--no-bound-file]
Prints one JSON object: {"label", "build", "baseline", "check": [{"ranks", "new": {"seconds",
"cpu_seconds", "peak_mb", "rc"}, "old": {...}}], "steps": {"steps", "new", "old", "worker_check"}, "bound_file":
{"bytes", "distrun", "worker_check"}, "bound_ok", "worker": {"ranks", "new": {"largest_worker_mb", "rc"}, "old": {...}}};
--table prints a Markdown table as well. Every measurement runs in a
process of its own, so one run's peak never hides another's. The scenario files are written
here, so both builds read the same input.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def check_scenario(ranks):
    # 1 MiB of float32 per rank: [ranks, 262144 / ranks] splits evenly for reduce_scatter and all_to_all.
    cols = max(1, 262144 // ranks)
    return f"""name: check_cost_{ranks}
world_size: {ranks}
tensors:
  x: {{shape: [world_size, {cols}], fill: "rank + i + j"}}
steps:
  - {{op: all_reduce, input: x, output: a, print: false}}
  - {{op: reduce_scatter, input: x, output: r, print: false}}
  - {{op: all_to_all, input: x, output: t, print: false}}
"""


WORKER_SCENARIO = """name: check_cost_worker
timeout: 120
tensors:
  x: {shape: [1048576], fill: "rank + 1"}
steps:
  - {op: all_reduce, input: x, reduce: sum, print: false}
"""


# The old check (every rank simulated with values in the launcher), for runs without --baseline
# or beyond --baseline-max-ranks: main at 0c88d07 measured with --baseline on the 2-core
# development host (loaded by other builds: compare CPU seconds). On a quieter host the old check
# took 125 s and 8.4 GB at 4096 ranks.
RECORDED_OLD = {
    1024: {"seconds": 54.3, "cpu_seconds": 28.4, "peak_mb": 2073.4, "source": "main 0c88d07, loaded 2-core host"},
    4096: {"seconds": 238.33, "cpu_seconds": 151.69, "peak_mb": 8343.2, "source": "main 0c88d07, loaded 2-core host"},
}
RECORDED_OLD_WORKER = {32: {"largest_worker_mb": 63.1, "source": "main 0c88d07"}}


# The bound of reading (docs/scenario.md): every file up to the size bound is accepted or refused
# within these, by distrun --check and by distrun-worker --check alike.
BOUND_CPU_SECONDS = 1.0
BOUND_PEAK_MB = 64.0
SIZE_BOUND = 16 * 1024 * 1024


# The largest files of each kind that the node bound accepts (yaml_guard.hpp: 1 000 000 nodes,
# keys included) within the size bound: every step or value is a node or a few, so these hold
# the most a loaded scenario can. name -> (text, entries, accepted, ranks checked by distrun):
# a file made to be refused (a name no tensor has) is held to the bound as well, but may exit 2.
MAX_NODES = 1000000


def long_files():
    # tensors, x, its spec, shape, [4], steps: 10 nodes; a step {op: all_reduce, input: x}: 5.
    n = (MAX_NODES - 10) // 5
    yield "all_reduce_steps", "tensors:\n  x: {shape: [4]}\nsteps:\n" + "  - {op: all_reduce, input: x}\n" * n, n, True, 2
    # A broadcast with an inline spec: 12 nodes.
    n = (MAX_NODES - 3) // 12
    yield ("broadcast_inline_steps", "steps:\n" + "  - {op: broadcast, input: {shape: [4], fill: 1}, src: 1}\n" * n, n,
           True, 2)
    # Steps that all differ: each names its own result (7 nodes a step), gives its own number,
    # or reads a tensor of its own name (5 nodes: the most names a file can hold). The last two
    # are refused by distrun once read whole (src 2 of 2 ranks; no tensor x0) and accepted by
    # distrun-worker --check, which has no world to check them against.
    n = (MAX_NODES - 10) // 7
    yield ("distinct_steps", "tensors:\n  x: {shape: [4]}\nsteps:\n" +
           "".join("  - {op: all_reduce, input: x, output: y%d}\n" % i for i in range(n)), n, True, 2)
    yield ("distinct_src", "tensors:\n  x: {shape: [4]}\nsteps:\n" +
           "".join("  - {op: broadcast, input: x, src: %d}\n" % i for i in range(n)), n, False, 2)
    n = (MAX_NODES - 10) // 5
    yield ("distinct_inputs", "tensors:\n  x: {shape: [4]}\nsteps:\n" +
           "".join("  - {op: all_reduce, input: x%d}\n" % i for i in range(n)), n, False, 2)
    # Results held by one rank each in a world of 1 024 (11 nodes a step): a rank's table of
    # tensors must cost what it holds, not the file's every name.
    n = (MAX_NODES - 10) // 11
    yield ("sparse_results", "tensors:\n  x: {shape: [4]}\nsteps:\n" +
           "".join("  - {op: send_recv, input: x, src: %d, dst: %d, output: r%d}\n" % (i % 1024, (i + 1) % 1024, i)
                   for i in range(n)), n, True, 1024)
    # One float64 tensor of `values`, 15-character numbers: 16 MiB at the node bound.
    n = MAX_NODES - 14
    values = ", ".join("%.8e" % (i * 1.2345678) for i in range(n))
    yield ("values", "tensors:\n  v: {dtype: float64, values: [" + values + "]}\nsteps:\n  - {op: barrier}\n", n, True,
           2)


def measure_check(distrun, path, ranks):
    """Runs in a fresh process (see --one-check): ru_maxrss of children is that process's only child.
    ranks 0: `distrun-worker --check` beside `distrun`."""
    t0 = time.monotonic()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cmd = ([os.path.join(os.path.dirname(distrun), "distrun-worker"), "--check", path] if ranks == 0 else
           [distrun, "--check", "--nproc-per-node", str(ranks), path])
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU time as well as wall time: on a loaded host the wall clock mostly measures the others.
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if p.returncode not in (0, 2):
        print(p.stderr[-2000:], file=sys.stderr)
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_mb": round(r1.ru_maxrss / 1024, 1),
            "rc": p.returncode}


def run_check(distrun, path, ranks):
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--one-check", distrun, path, str(ranks)],
                       capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        print(p.stderr[-2000:], file=sys.stderr)
        return {"rc": p.returncode}
    return json.loads(p.stdout.strip().splitlines()[-1])


def run_worker(distrun, path, ranks):
    p = subprocess.run([sys.executable, os.path.join(HERE, "peak_rss.py"), "worker", distrun, "--nproc-per-node",
                        str(ranks), path], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.strip():
        print(p.stderr[-2000:], file=sys.stderr)
        return {"largest_worker_mb": None, "rc": p.returncode}
    report = json.loads(p.stdout.strip().splitlines()[-1])
    workers = [q["hwm_kb"] for q in report["processes"] if "distrun-worker" in q["cmd"]]
    return {"largest_worker_mb": round(max(workers) / 1024, 1) if workers else None, "workers_seen": len(workers),
            "rc": report["rc"]}


def table(out):
    rows = ["| measure | ranks | old | new | target |", "|---|---:|---:|---:|---|"]

    def fig(d, key, unit):
        v = d.get(key) if d else None
        return "n/a" if v is None else f"{v} {unit}"

    for c in out["check"]:
        for key, unit, target in (("cpu_seconds", "s CPU", "<= 2 s at 4096"), ("seconds", "s wall", "<= 2 s at 4096"),
                                  ("peak_mb", "MB", "<= 200 MB at 4096")):
            rows.append(f"| `--check` {key} | {c['ranks']} | {fig(c['old'], key, unit)} | {fig(c['new'], key, unit)} | {target} |")
    if "steps" in out:
        s = out["steps"]
        for key, unit in (("cpu_seconds", "s CPU"), ("seconds", "s wall"), ("peak_mb", "MB")):
            rows.append(f"| `--check` {key}, {s['steps']} barrier steps | 2 | {fig(s['old'], key, unit)} | "
                        f"{fig(s['new'], key, unit)} | {'<= 64 MB' if key == 'peak_mb' else '<= 1 s CPU' if key == 'cpu_seconds' else ''} |")
            rows.append(f"| `distrun-worker --check` {key}, {s['steps']} barrier steps | 1 | n/a | "
                        f"{fig(s['worker_check'], key, unit)} | {'<= 64 MB' if key == 'peak_mb' else '<= 1 s CPU' if key == 'cpu_seconds' else ''} |")
    if "bound_file" in out:
        b = out["bound_file"]
        for who in ("distrun", "worker_check"):
            for key, unit in (("cpu_seconds", "s CPU"), ("peak_mb", "MB")):
                rows.append(f"| `{'distrun' if who == 'distrun' else 'distrun-worker'} --check` {key}, {b['bytes']} B file "
                            f"(exit {b[who].get('rc')}) | | n/a | {fig(b[who], key, unit)} | "
                            f"{'<= 64 MB' if key == 'peak_mb' else '<= 1 s CPU'} |")
    for lf in out.get("long_files", []):
        for who in ("distrun", "worker_check"):
            for key, unit in (("cpu_seconds", "s CPU"), ("peak_mb", "MB")):
                rows.append(f"| `{'distrun' if who == 'distrun' else 'distrun-worker'} --check` {key}, {lf['name']} "
                            f"({lf['entries']}, {lf['bytes']} B, exit {lf[who].get('rc')}) | | n/a | "
                            f"{fig(lf[who], key, unit)} | {'<= 64 MB' if key == 'peak_mb' else '<= 1 s CPU'} |")
    if "worker" in out:
        w = out["worker"]
        rows.append(f"| largest worker, checked 4 MiB all_reduce | {w['ranks']} | {fig(w['old'], 'largest_worker_mb', 'MB')} | "
                    f"{fig(w['new'], 'largest_worker_mb', 'MB')} | <= 64 MB |")
    return "\n".join(rows)


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--one-check":
        print(json.dumps(measure_check(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "..", "build"))
    ap.add_argument("--baseline", help="a build of the code before the change (its bin/distrun)")
    ap.add_argument("--baseline-max-ranks", type=int, default=1024)
    ap.add_argument("--ranks", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--steps", type=int, default=200000, help="barrier steps of the long file (0: skip it)")
    ap.add_argument("--worker-ranks", type=int, default=32)
    ap.add_argument("--label", default="")
    ap.add_argument("--skip-worker", action="store_true")
    ap.add_argument("--table", action="store_true", help="print a Markdown table after the JSON")
    ap.add_argument("--no-bound-file", action="store_true", help="skip the file at the size bound")
    a = ap.parse_args()
    distrun = os.path.join(a.build, "bin", "distrun")
    old_distrun = os.path.join(a.baseline, "bin", "distrun") if a.baseline else None
    out = {"label": a.label, "build": os.path.abspath(a.build), "baseline": a.baseline and os.path.abspath(a.baseline),
           "check": []}
    with tempfile.TemporaryDirectory() as d:
        for ranks in a.ranks:
            path = os.path.join(d, f"check_cost_{ranks}.yaml")
            with open(path, "w") as f:
                f.write(check_scenario(ranks))
            row = {"ranks": ranks, "new": run_check(distrun, path, ranks)}
            if old_distrun and ranks <= a.baseline_max_ranks:
                row["old"] = dict(run_check(old_distrun, path, ranks), source="measured (--baseline)")
            else:
                row["old"] = RECORDED_OLD.get(ranks)
            out["check"].append(row)
        if a.steps:
            path = os.path.join(d, "check_cost_steps.yaml")
            with open(path, "w") as f:
                f.write("steps:\n" + "  - op: barrier\n" * a.steps)
            s = {"steps": a.steps, "new": run_check(distrun, path, 2), "worker_check": run_check(distrun, path, 0)}
            s["old"] = dict(run_check(old_distrun, path, 2), source="measured (--baseline)") if old_distrun else None
            out["steps"] = s
            bounded = [s["new"], s["worker_check"]]
        else:
            bounded = []
        if not a.no_bound_file:
            path = os.path.join(d, "check_cost_bound.yaml")
            line = "  - op: barrier\n"
            with open(path, "w") as f:
                f.write("steps:\n" + line * ((SIZE_BOUND - len("steps:\n")) // len(line)))
            b = {"bytes": os.path.getsize(path), "distrun": run_check(distrun, path, 2),
                 "worker_check": run_check(distrun, path, 0)}
            out["bound_file"] = b
            bounded += [b["distrun"], b["worker_check"]]
        out["long_files"] = []
        for name, text, entries, accepted, ranks in long_files():
            path = os.path.join(d, f"check_cost_{name}.yaml")
            with open(path, "w") as f:
                f.write(text)
            assert os.path.getsize(path) <= SIZE_BOUND, name
            row = {"name": name, "entries": entries, "bytes": os.path.getsize(path), "accepted": accepted,
                   "distrun": run_check(distrun, path, ranks), "worker_check": run_check(distrun, path, 0)}
            out["long_files"].append(row)
            bounded += [row["distrun"], row["worker_check"]]
        # Accepted (0) or refused (2), within the CPU time and memory of the bound.
        out["bound_ok"] = all(m.get("rc") in (0, 2) and m["cpu_seconds"] <= BOUND_CPU_SECONDS and
                              m["peak_mb"] <= BOUND_PEAK_MB for m in bounded)
        # The long files made to be accepted must be: one refused would measure only its refusal.
        out["bound_ok"] = out["bound_ok"] and all(lf[w].get("rc") == 0 for lf in out["long_files"] if lf["accepted"]
                                                  for w in ("distrun", "worker_check"))
        if not a.skip_worker:
            worker_path = os.path.join(d, "check_cost_worker.yaml")
            with open(worker_path, "w") as f:
                f.write(WORKER_SCENARIO)
            w = {"ranks": a.worker_ranks, "new": run_worker(distrun, worker_path, a.worker_ranks)}
            w["old"] = (dict(run_worker(old_distrun, worker_path, a.worker_ranks), source="measured (--baseline)")
                        if old_distrun else RECORDED_OLD_WORKER.get(a.worker_ranks))
            out["worker"] = w
    print(json.dumps(out))
    if a.table:
        print(table(out))
    if not out["bound_ok"]:
        print(f"check_cost: a long file took more than {BOUND_CPU_SECONDS} s of CPU or {BOUND_PEAK_MB} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

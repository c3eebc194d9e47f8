"""distrun-bench as real processes: each flag changes what it should, #wrong catches a
collective broken on purpose (DISTRUN_BENCH_TEST_CORRUPT), the -J document validates against
the schema in the repository, the CSV matches it, bad input exits 2 before any rank starts,
the same program runs under distrun, mpirun and a one-node SLURM, and plot.py draws what it
writes."""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile

from bench_harness import BENCH, DISTRUN, PYTHON, ROOT, SCHEMA, check, main, refused, run, skip, validate

TMP = tempfile.mkdtemp(prefix="distrun-bench-test-")
SMALL = ["-n", "3", "-w", "1"]
EVERY = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather", "scatter",
         "send_recv"]  # `all`'s order


def bench(args, n=2, env=None, timeout=90):
    """distrun --nproc-per-node n distrun-bench ARGS -J FILE; returns (rc, stdout, stderr, doc)."""
    path = os.path.join(TMP, f"out{len(os.listdir(TMP))}.json")
    r = run([DISTRUN, "--nproc-per-node", str(n), "--", BENCH, *args, "-J", path], timeout=timeout, env=env)
    doc = json.load(open(path)) if os.path.exists(path) else None
    return r.returncode, r.stdout, r.stderr, doc


def records(doc):
    """The -J rows (nccl-tests' layout: one per size, a figures object per placement) as one
    flat record per measured placement, as the CSV has them."""
    out = []
    for row in doc["results"]:
        for placement in ("out_of_place", "in_place"):
            if row[placement] is not None:
                flat = {k: v for k, v in row.items() if k not in ("out_of_place", "in_place")}
                out.append({**flat, "placement": placement, **row[placement]})
    return out


def rows(doc, placement="out_of_place"):
    return [r for r in records(doc) if r["placement"] == placement]


def table_lines(out):
    return [l for l in out.splitlines() if l and not l.startswith("#")]


def test_flags():
    # -b -e -f: the sizes; the table has one line per size, both placements on it.
    rc, out, err, doc = bench(["all_reduce", "-b", "1K", "-e", "16K", "-f", "4", *SMALL])
    check(rc == 0, f"rc {rc}", out + err)
    validate(doc, "all_reduce -J")
    check([r["size"] for r in rows(doc)] == [1024, 4096, 16384], "-b 1K -e 16K -f 4 sizes", out)
    check([r["size"] for r in rows(doc, "in_place")] == [1024, 4096, 16384], "in-place measured too", out)
    check(doc["config"]["placements"] == ["out_of_place", "in_place"], "config.placements: both timed",
          json.dumps(doc["config"]))
    # The schema ties a null placement to config.placements: a row without one of the two it lists fails.
    broken = json.loads(json.dumps(doc))
    broken["results"][1]["in_place"] = None
    refused(broken, "a null in_place while config.placements lists it")
    lines = table_lines(out)
    check(len(lines) == 3 and lines[0].split()[:5] == ["1024", "256", "float", "sum", "-1"], "table rows", out)
    check(len(lines[0].split()) == 13, "out-of-place and in-place columns on one line", out)
    check("# Avg bus bandwidth" in out and "#  Rank  1" in out, "nccl-tests' header and footer", out)
    check(all(r["nwrong"] == 0 and r["samples"] == 3 for r in records(doc)), "-n 3: 3 iterations", out)
    check(doc["provenance"]["world_size"] == 2 and doc["provenance"]["transport"], "provenance", out)
    check("slowest rank" not in out, "no statistics lines without -v", out)
    # -i with -f 1: linear steps.
    rc, out, err, doc = bench(["all_gather", "-b", "1000", "-e", "3000", "-i", "1000", *SMALL])
    check(rc == 0 and [r["size"] for r in rows(doc)] == [1000, 2000, 3000], "-i 1000 steps", out + err)
    # -n, -w, -m, -z: recorded; -m divides each iteration's time among its runs.
    rc, out, err, doc = bench(["broadcast", "-b", "64", "-e", "64", "-n", "4", "-w", "2", "-m", "3", "-z", "1",
                               "-r", "1", "-v"])
    check(rc == 0, f"rc {rc}", out + err)
    r0 = rows(doc)[0]
    check(r0["actual_iterations"] == 4 and doc["config"]["aggregated_iterations"] == 3 and r0["samples"] == 4 and
          r0["root"] == 1, "-n -m -r in the rows", out)
    check(doc["config"]["warmup_iters"] == 2 and doc["config"]["blocking"] == 1, "-w -z in config", out)
    check(table_lines(out)[0].split()[4] == "1", "-r 1 in the root column", out)
    check("slowest rank" in out and "p99" in out, "-v prints the statistics", out)
    # -d and -o.
    rc, out, err, doc = bench(["reduce_scatter", "-b", "256", "-e", "256", "-d", "int32", "-o", "max", *SMALL], n=3)
    check(rc == 0 and all(r["type"] == "int32" and r["redop"] == "max" for r in records(doc)), "-d int32 -o max",
          out + err)
    check(table_lines(out)[0].split()[2:4] == ["int32", "max"], "type and redop columns", out)
    rc, out, err, doc = bench(["all_reduce", "-b", "64", "-e", "64", "-d", "half", "-o", "all", *SMALL])
    check(rc == 0 and sorted(r["redop"] for r in rows(doc)) == ["avg", "max", "min", "prod", "sum"], "-o all", out + err)
    # -c 0: nothing checked.
    rc, out, err, doc = bench(["all_to_all", "-b", "1K", "-e", "1K", "-c", "0", *SMALL])
    check(rc == 0 and all(r["nwrong"] is None for r in records(doc)), "-c 0: wrong is null", out + err)
    check(table_lines(out)[0].split()[8] == "N/A", "-c 0: #wrong N/A", out)
    check(len(rows(doc, "in_place")) == 1 and table_lines(out)[0].split()[9] != "N/A",
          "all_to_all timed in place too (through a copy aside, as nccl-tests times it)", out)
    # -O 1, -O 0: one placement timed, the other's columns N/A and its -J object null.
    for o, timed, idle, shown, blank in (("1", "out_of_place", "in_place", slice(5, 9), slice(9, 13)),
                                         ("0", "in_place", "out_of_place", slice(9, 13), slice(5, 9))):
        rc, out, err, doc = bench(["all_gather", "-b", "1K", "-e", "4K", "-f", "4", "-O", o, *SMALL])
        check(rc == 0, f"-O {o}: rc {rc}", out + err)
        validate(doc, f"-O {o} -J")
        for claimed in (["out_of_place", "in_place"], [idle]):
            refused(dict(doc, config=dict(doc["config"], placements=claimed)),
                    f"-O {o} with config.placements {claimed}")
        check(doc["config"]["placements"] == [timed] and len(doc["results"]) == 2 and
              all(r[idle] is None and r[timed]["samples"] == 3 for r in doc["results"]),
              f"-O {o}: only {timed} timed", json.dumps(doc["results"])[:2000])
        check(all(l.split()[blank] == ["N/A"] * 4 and "N/A" not in l.split()[shown] for l in table_lines(out)),
              f"-O {o}: the {idle} columns N/A", out)
    # -a: the reported time is rank 0's, the mean, the min or the max of the ranks' mean times
    # (from --raw-samples: each rank's time of each iteration); the statistics are over the
    # iterations, each the slowest rank's time (nccl-tests' -I).
    combine = {0: lambda m: m[0], 1: lambda m: sum(m) / len(m), 2: min, 3: max}
    for a in (0, 1, 2, 3):
        rc, out, err, doc = bench(["send_recv", "-b", "4K", "-e", "4K", "-a", str(a), "--raw-samples", *SMALL], n=3)
        r0 = rows(doc)[0]
        raw = r0["rank_times_us"]
        want = combine[a]([sum(t) / len(t) for t in raw])
        check(rc == 0 and abs(r0["time"] - want) <= 1e-6 * want, f"-a {a}: time {r0['time']} vs {want}", out + err)
        slowest = [max(t[i] for t in raw) for i in range(3)]
        check(abs(r0["max_us"] - max(slowest)) <= 1e-6 * r0["max_us"] and r0["samples"] == 3,
              "per-iteration statistics: the slowest rank's time", json.dumps(r0))
        check(len(r0["rank_arrivals_us"]) == 3 and 0 <= r0["slowest_rank"] < 3, "arrivals and the slowest rank", json.dumps(r0))
    # all: each collective in turn; --csv: the same records as CSV.
    csv_path = os.path.join(TMP, "all.csv")
    rc, out, err, doc = bench(["all", "-b", "1K", "-e", "1K", *SMALL, "--csv", csv_path, "-r", "1"], n=3)
    check(rc == 0, f"all: rc {rc}", out + err)
    validate(doc, "all -J")
    colls = [r["collective"] for r in rows(doc)]
    check(colls == EVERY, f"all: every collective in turn: {colls}", out)
    check([r["collective"] for r in rows(doc, "in_place")] == EVERY,
          "every collective timed in place too, as nccl-tests times them", out)
    with open(csv_path) as f:
        table = list(csv.DictReader(f))
    check(len(table) == len(records(doc)), "one CSV line per measured placement", str(table[:2]))
    check([float(t["p50_us"]) for t in table] == [r["p50_us"] for r in records(doc)], "CSV p50 = JSON p50")
    check(list(table[0])[:9] == ["size", "count", "type", "redop", "root", "actual_iterations", "experiment_name",
                                 "collective", "placement"] and list(table[0])[9:13] == ["time", "alg_bw", "bus_bw",
                                                                                          "nwrong"],
          "CSV: nccl-tests' keys first", str(list(table[0])))


def test_compat():
    """nccl-tests' meanings, one by one: the per-rank count column, -w 1 by default, -c N checked
    runs, -z 0..3, -T 0, -r -1 (every root in turn) and NCCL_TESTS_MIN_BW."""
    rc, out, err, doc = bench(["all_gather", "-b", "1K", "-e", "1K", "-n", "2"])
    check(rc == 0 and table_lines(out)[0].split()[:2] == ["1024", "128"], "count column: each rank's 128 of 256",
          out + err)
    check(rows(doc)[0]["count"] == 128 and doc["config"]["warmup_iters"] == 1, "count per rank; -w 1 by default", out)
    # -c 3: three checked runs, each counted (rank 1 corrupts one element of each).
    rc, out, err, doc = bench(["all_reduce", "-b", "64", "-e", "64", "-c", "3", *SMALL],
                              env={"DISTRUN_BENCH_TEST_CORRUPT": "1"})
    check(rc == 1 and all(r["nwrong"] == 3 for r in records(doc)), "-c 3: three checked runs", out + err)
    for z in ("0", "1", "2", "3"):
        rc, out, err, doc = bench(["all_reduce", "-b", "64", "-e", "64", "-z", z, "-T", "0", *SMALL])
        check(rc == 0 and doc["config"]["blocking"] == int(z) and rows(doc)[0]["nwrong"] == 0, f"-z {z} -T 0", out + err)
    rc, out, err, doc = bench(["broadcast", "-b", "64", "-e", "64", "-r", "-1", *SMALL], n=3)
    check(rc == 0 and [r["root"] for r in rows(doc)] == [0, 1, 2], "-r -1: every root in turn", out + err)
    check([l.split()[4] for l in table_lines(out)] == ["0", "1", "2"], "-r -1: the root column", out)
    # -b 1: below one float, 0 B of 0 elements, as nccl-tests prints it; then 4 B of one.
    rc, out, err, doc = bench(["all_reduce", "-b", "1", "-e", "4", "-f", "4", *SMALL])
    check(rc == 0 and [l.split()[:2] for l in table_lines(out)] == [["0", "0"], ["4", "1"]], "-b 1: 0 B, 0 elements",
          out + err)
    validate(doc, "-b 1 -J")
    # -J: nccl-tests' layout (rows with out_of_place/in_place objects and its summary keys).
    check(doc["version"] == 2 and [r["size"] for r in doc["results"]] == [0, 4] and
          doc["results"][1]["in_place"]["nwrong"] == 0 and doc["out_of_bounds"] == {"count": 0, "okay": True} and
          doc["average_bus_bandwidth"]["okay"] == "unchecked" and doc["config"]["iterations"] == 3,
          "-J: nccl-tests' keys", json.dumps(doc)[:3000])
    rc, out, err, doc = bench(["all_reduce", "-b", "64", "-e", "64", *SMALL], env={"NCCL_TESTS_MIN_BW": "1000000"})
    check(rc == 1 and "# Avg bus bandwidth" in out and out.split("# Avg bus bandwidth")[1].split("\n")[0].endswith(
        "FAILED"), "NCCL_TESTS_MIN_BW above the bandwidth: FAILED, exit 1", out + err)
    check(doc["average_bus_bandwidth"]["okay"] is False, "NCCL_TESTS_MIN_BW: okay false in -J", json.dumps(doc)[:2000])
    rc, out, err, doc = bench(["all_reduce", "-b", "64", "-e", "64", *SMALL], env={"NCCL_TESTS_MIN_BW": "0"})
    check(rc == 0 and out.split("# Avg bus bandwidth")[1].split("\n")[0].endswith("OK"), "NCCL_TESTS_MIN_BW 0: OK",
          out + err)


def test_wrong():
    # Rank 1 corrupts one element of each checked result: every collective and placement
    # shows it (rank 1 is the root, so rooted ones check it too), the run fails.
    env = {"DISTRUN_BENCH_TEST_CORRUPT": "1"}
    rc, out, err, doc = bench(["all", "-b", "1K", "-e", "1K", *SMALL, "-r", "1"], n=3, env=env)
    check(rc == 1, f"exit 1 when #wrong > 0, got {rc}", out + err)
    check(doc is not None and all(r["nwrong"] == 1 for r in records(doc)), "#wrong = 1 everywhere",
          json.dumps(doc and doc["results"])[:2000])
    check(all(l.split()[8] == "1" for l in table_lines(out)), "#wrong column", out)
    check("FAILED" in out, "footer says FAILED", out)
    # The schema catches a record that lost a key (the validation can fail).
    broken = json.loads(json.dumps(doc))
    del broken["results"][0]["out_of_place"]["p50_us"]
    try:
        validate(broken, "broken")
    except Exception:
        pass
    else:
        check(False, "a record without p50_us must not validate")


def test_bad_input():
    for args, words in ((["all_reducee"], "unknown collective 'all_reducee'"), (["all_reduce", "-d", "quad"], "-d"),
                        (["all_reduce", "-b", "1Q"], "-b: bad size"), (["all_reduce", "-b", "2K", "-e", "1K"], "-b"),
                        (["all_reduce", "-o", "nope"], "-o"), (["all_reduce", "-O", "2"], "--out_of_place"), (["reduce", "-o", "bxor", "-d", "float"], "needs an integer"), (["qualify", "--min-fraction", "2"], "--min-fraction")):
        r = run([BENCH, *args], timeout=30)
        check(r.returncode == 2 and words in r.stderr, f"{args}: exit 2 naming the problem", r.stdout + r.stderr)
    r = run([BENCH, "--help"], timeout=30)
    check(r.returncode == 0 and "-b,--minbytes" in r.stdout and "-O,--out_of_place" in r.stdout and
          "--csv" in r.stdout, "--help", r.stdout)
    # The help's list is the collective table's, which bench.engine holds the schema's enum to.
    names = json.load(open(SCHEMA))["definitions"]["size_row"]["properties"]["collective"]["enum"]
    check(", ".join(names) + ", or all" in r.stdout, "--help lists the schema's collectives", r.stdout)


def test_mpirun():
    if not shutil.which("mpirun"):
        skip("mpirun not found (openmpi-bin; scripts/deps.sh test)")
    path = os.path.join(TMP, "mpi.json")
    r = run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", BENCH, "all_gather", "-b", "3K", "-e", "3K",
             *SMALL, "-J", path], timeout=120, env={"OMPI_MCA_plm_rsh_agent": "false"})
    check(r.returncode == 0, f"mpirun: rc {r.returncode}", r.stdout + r.stderr)
    doc = json.load(open(path))
    validate(doc, "mpirun -J")
    check(doc["provenance"]["world_size"] == 3 and rows(doc)[0]["nwrong"] == 0, "3 ranks from Open MPI", r.stdout)
    check(len(table_lines(r.stdout)) == 1, "one table, from rank 0 only", r.stdout)


# Run by plot.py's Python: draws a document with plot.py's main and reports what a reader sees:
# the panels' titles, whether the legend overlaps a panel, and for qualify the colour of each
# node's name and the framed directions.
PLOT_CHECK = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import plot
from matplotlib.patches import Rectangle
doc = json.load(open(sys.argv[2]))
sys.argv = ["plot.py", sys.argv[2], sys.argv[3]]
fig = plot.main()
if doc["kind"] == "bench":
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    panels = [ax for ax in fig.axes if ax.axison and ax.get_title()]
    legend = fig.legends[0].get_window_extent(r)
    print(json.dumps({"panels": [ax.get_title() for ax in panels],
                      "legend_overlaps": [ax.get_title() for ax in panels if legend.overlaps(ax.get_window_extent(r))]}))
else:
    ax = fig.axes[0]
    print(json.dumps({"red_names": [i for i, t in enumerate(ax.get_yticklabels()) if t.get_color() == "red"],
                      "framed": sum(isinstance(p, Rectangle) and p.get_edgecolor()[:3] == (1.0, 0.0, 0.0)
                                    for p in ax.patches)}))
"""


def plot_check(doc, name):
    """plot.py's picture of `doc` as a PNG, and what PLOT_CHECK saw in it."""
    src, png = os.path.join(TMP, f"{name}.json"), os.path.join(TMP, f"{name}.png")
    with open(src, "w") as f:
        json.dump(doc, f)
    p = run([PYTHON, "-c", PLOT_CHECK, os.path.join(ROOT, "scripts", "bench"), src, png], timeout=120)
    check(p.returncode == 0, f"plot.py {name}: rc {p.returncode}", p.stdout + p.stderr)
    with open(png, "rb") as f:
        check(f.read(8) == b"\x89PNG\r\n\x1a\n", f"plot.py {name}: a PNG file")
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_plot():
    """plot.py draws `all -d all` as one panel per collective with the legend outside every
    panel, and a qualify document as a heatmap with the suspects' names in red and the slow
    directions framed (the qualify run's thresholds are loose: three ranks of one loaded host
    are judged elsewhere; its suspect and slow direction are then set in the document)."""
    if subprocess.run([PYTHON, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        skip("python3-matplotlib is not installed (scripts/deps.sh test)")
    rc, out, err, doc = bench(["all", "-b", "1K", "-e", "1K", "-d", "all", "-n", "1", "-w", "0", "-c", "0"])
    check(rc == 0, f"all -d all: rc {rc}", out + err)
    seen = plot_check(doc, "bench")
    check(sorted(seen["panels"]) == sorted(EVERY), f"one panel per collective: {seen['panels']}")
    check(seen["legend_overlaps"] == [], f"the legend outside the panels: overlaps {seen['legend_overlaps']}")
    qpath = os.path.join(TMP, "q.json")
    r = run([DISTRUN, "--nproc-per-node", "3", "--", BENCH, "qualify", "--per-device", "-b", "64K", "-n", "2",
             "--min-fraction", "0.01", "--max-latency-factor", "1000", "-J", qpath], timeout=90,
            env={"DISTRUN_CMA": "0"})
    check(r.returncode == 0 and "# verdict: OK" in r.stdout, f"qualify --per-device: rc {r.returncode}",
          r.stdout + r.stderr)
    q = json.load(open(qpath))
    validate(q, "qualify --per-device -J")
    node = q["qualify"]["nodes"][1]
    q["qualify"]["suspect_nodes"] = [{"node": 1, "host": node["host"], "address": node["address"]}]
    slow = [d for d in q["qualify"]["directions"] if d["src"] == 1]
    for d in slow:
        d["slow"] = ["bw"]
    seen = plot_check(q, "qualify")
    check(seen["red_names"] == [1], f"the suspect's name in red: {seen['red_names']}")
    check(seen["framed"] == len(slow) > 0, f"each slow direction framed: {seen['framed']} of {len(slow)}")


def test_slurm():
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher"))
    from slurm_cluster import one_node_cluster  # noqa: E402

    with one_node_cluster() as (env, d):
        path = os.path.join(d, "slurm.json")
        out = os.path.join(d, "bench.out")
        cmd = f"srun --ntasks-per-node=3 --overcommit {BENCH} reduce -b 1K -e 4K -f 4 -n 3 -w 1 -r 2 -J {path}"
        try:
            r = subprocess.run(["sbatch", "--parsable", "--wait", "-N1", "-n3", "--overcommit", "-o", out, "--wrap", cmd],
                               env=env, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            subprocess.run(["scancel", "-u", "root"], env=env, capture_output=True, timeout=10)
            check(False, "sbatch: no result in 120 s")
        text = open(out).read() if os.path.exists(out) else ""
        check(r.returncode == 0, f"sbatch: rc {r.returncode}", r.stderr + text)
        doc = json.load(open(path))
        validate(doc, "srun -J")
        check(doc["provenance"]["world_size"] == 3 and [x["size"] for x in rows(doc)] == [1024, 4096],
              "3 ranks from SLURM, both sizes", text)
        check(all(x["root"] == 2 and x["nwrong"] == 0 for x in records(doc)), "root 2, right results", text)


if __name__ == "__main__":
    try:
        main({"flags": test_flags, "compat": test_compat, "wrong": test_wrong, "bad_input": test_bad_input, "mpirun": test_mpirun,
              "plot": test_plot, "slurm": test_slurm})
    finally:
        shutil.rmtree(TMP, ignore_errors=True)

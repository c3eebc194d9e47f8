"""The flight recorder with real processes under distrun: ranks that fall
out of step, and the failure summary that names the first one. The process table is checked
afterwards.
Usage: DISTRUN=... MISMATCH=.../distrun-test-mismatch flight_tests.py CASE
Cases: wrong_collective (rank 3 in all_gather while the others are in all_reduce),
never_entered (rank 2 never enters a collective), scenario_origin (a scenario's frozen rank:
the table names each rank's step by file:line)."""
import os
import signal
import time

from fault_harness import DATA, Failed, Job, check, expect_no_leftovers, new_mark, wait_until, worker_pids

MISMATCH = os.environ.get("MISMATCH", "")


def run_mismatch(mode, want):
    mark = new_mark()
    job = Job(["--nproc", "4", "--stop-grace", "2", "--", MISMATCH, mode, "3000"], mark)
    rc = job.wait(90)
    out = job.output()
    err = job.text("err")
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    check("flight recorder (the last collective of each rank):" in err, "no flight recorder table in the summary", out)
    for r in range(4):
        check(f"  rank {r}: " in err, f"the table has no line for rank {r}", out)
    check(f"first mismatch: {want}" in err, f"the summary does not say 'first mismatch: {want}'", out)
    print(next(l for l in err.splitlines() if "first mismatch" in l).strip())
    expect_no_leftovers(mark)


def case_wrong_collective():
    run_mismatch("op", "rank 3 in all_gather #5 while the others are in all_reduce #5")


def case_never_entered():
    run_mismatch("skip", "rank 2 never entered all_reduce #5 (ranks 0, 1, 3 did)")


def case_scenario_origin():
    """SIGSTOP rank 1 of a looping scenario: the table names every rank's step by file:line."""
    mark = new_mark()
    scenario = os.path.join(DATA, "loop_all_reduce.yaml")
    job = Job(["--nproc", "3", "--timeout", "3", scenario], mark)
    wait_until(lambda: job.first_line("out", "4096"), 60, "the job to start\n" + job.output())
    pids = wait_until(lambda: (lambda p: p if len(p) == 3 else None)(worker_pids(mark)), 10, "3 workers")
    time.sleep(0.3)
    os.kill(pids[1], signal.SIGSTOP)
    rc = job.wait(60)
    out = job.output()
    err = job.text("err")
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    lines = [l for l in err.splitlines() if l.startswith("  rank ") and " #" in l]
    check(len(lines) == 3, "one table line per rank", out)
    # The second bench (line 13 of the scenario) is where every rank was: in its all_reduce
    # loop, or (a slow start, e.g. under the sanitizers) in the barrier the bench opens with.
    check(all(l.rstrip().endswith(f"{scenario}:13") for l in lines), "each line names the step's file:line", out)
    expect_no_leftovers(mark)


if __name__ == "__main__":
    from fault_harness import main
    if not MISMATCH or not os.access(MISMATCH, os.X_OK):
        print(f"FAIL: MISMATCH={MISMATCH!r} is not an executable")
        raise SystemExit(1)
    main({k[5:]: v for k, v in globals().items() if k.startswith("case_")})

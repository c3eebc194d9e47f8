"""Process tests of distrun on one host: real workers, real signals, the process table checked.
Usage: DISTRUN=build/bin/distrun process_tests.py CASE"""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import uuid

from launcher_harness import (DATA, PYTHON, Failed, check, distrun, expect_no_leftovers, free_port, main,
                              need_torch, need_worker, run, DISTRUN)

TORCH_VARS = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
              "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
              "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS",
              "DISTRUN_STORE_SECRET"]
DUMP_ENV = "import json,os; print('ENV ' + json.dumps({k: os.environ.get(k) for k in %r}))" % TORCH_VARS
# Several nodes need a job secret (the agents' rendezvous refuses to start without one).
SECRET = {"DISTRUN_STORE_SECRET": "process-tests-" + uuid.uuid4().hex}


def marker():
    return "distrun-test-" + uuid.uuid4().hex[:12]


def sh(script, mark):
    """A shell worker whose command line carries `mark`, for the process-table checks."""
    return ["--", "sh", "-c", script + " # " + mark]


def envs_from(stdout):
    out = []
    for line in stdout.splitlines():
        if "ENV " in line:
            out.append(json.loads(line.split("ENV ", 1)[1]))
    return sorted(out, key=lambda e: int(e["RANK"]))


def case_environment():
    r = distrun("--nproc-per-node", "3", "--run_id", "job42", "--max_restarts", "2", "--", PYTHON, "-c", DUMP_ENV,
                env={"OMP_NUM_THREADS": None})
    check(r.returncode == 0, f"rc {r.returncode}", r.stderr)
    envs = envs_from(r.stdout)
    check(len(envs) == 3, "three workers report", r.stdout)
    secrets = {e["DISTRUN_STORE_SECRET"] for e in envs}
    check(len(secrets) == 1 and len(secrets.pop()) >= 32, "one hex per-job secret", r.stdout)
    ports = {e["MASTER_PORT"] for e in envs}
    check(len(ports) == 1, "one MASTER_PORT", r.stdout)
    for i, e in enumerate(envs):
        want = {"RANK": str(i), "LOCAL_RANK": str(i), "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "3", "GROUP_RANK": "0",
                "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(i), "ROLE_WORLD_SIZE": "3", "ROLE_NAME": "default",
                "MASTER_ADDR": "127.0.0.1", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "2",
                "TORCHELASTIC_RUN_ID": "job42", "OMP_NUM_THREADS": "1"}
        for k, v in want.items():
            check(e[k] == v, f"rank {i}: {k}={e[k]!r}, want {v!r}", r.stdout)
    # Rank 0's stdout passes unprefixed, the others carry [rankN]:
    lines = [l for l in r.stdout.splitlines() if "ENV " in l]
    check(any(l.startswith("ENV ") for l in lines), "rank 0 unprefixed", r.stdout)
    check(any(l.startswith("[rank2]:ENV ") for l in lines), "rank 2 prefixed", r.stdout)
    # A user's OMP_NUM_THREADS is kept.
    r = distrun("--nproc", "2", "--", PYTHON, "-c", DUMP_ENV, env={"OMP_NUM_THREADS": "7"})
    check(all(e["OMP_NUM_THREADS"] == "7" for e in envs_from(r.stdout)), "OMP_NUM_THREADS kept", r.stdout)


def case_reaper_shim_program():
    """Each worker's parent is distrun-shim, the small program beside distrun: not distrun itself,
    whose start loads libdistrun, Gloo, NCCL and CUDA's runtime once more per worker."""
    r = distrun("--nproc", "2", "--", PYTHON, "-c", "import os; print('PARENT', os.readlink('/proc/%d/exe' % os.getppid()))")
    check(r.returncode == 0, f"rc {r.returncode}", r.stderr)
    parents = [l.split("PARENT ", 1)[1] for l in r.stdout.splitlines() if "PARENT " in l]
    check(len(parents) == 2, "two workers report their parent", r.stdout)
    check(all(p == os.path.join(os.path.dirname(os.path.realpath(DISTRUN)), "distrun-shim") for p in parents),
          f"workers' parents: {parents}, want distrun-shim beside {DISTRUN}", r.stdout)


def case_rank_exits_nonzero():
    m = marker()
    t0 = time.time()
    r = distrun("--nproc", "4", *sh('if [ "$RANK" = 2 ]; then echo "bad thing on $RANK" >&2; exit 3; fi; sleep 30', m))
    took = time.time() - t0
    check(r.returncode == 1, f"rc {r.returncode}, want 1", r.stderr)
    for want in ["rank       : 2 (local_rank 2)", "exit code 3", "bad thing on 2", "host       : " + socket.gethostname()]:
        check(want in r.stderr, f"summary lacks {want!r}", r.stderr)
    check(took < 10, f"others stopped promptly (took {took:.1f}s)")
    expect_no_leftovers(m)


def case_rank_killed_by_signal():
    m = marker()
    r = distrun("--nproc", "3", *sh('if [ "$RANK" = 1 ]; then kill -SEGV $$; fi; sleep 30', m))
    check(r.returncode == 1, f"rc {r.returncode}", r.stderr)
    check("SIGSEGV" in r.stderr and "rank       : 1" in r.stderr, "names the signal and rank", r.stderr)
    expect_no_leftovers(m)


def signal_to_distrun(sig):
    m = marker()
    with tempfile.TemporaryDirectory() as d:
        # Each worker records the signal it got, proving distrun forwarded it.
        script = f'trap "echo got > {d}/$RANK; exit 5" {sig.name[3:]}; echo ready; while true; do sleep 0.1; done'
        p = subprocess.Popen([DISTRUN, "--nproc", "2", *sh(script, m)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        seen = 0
        deadline = time.time() + 20
        while seen < 2 and time.time() < deadline:
            if "ready" in p.stdout.readline():
                seen += 1
        check(seen == 2, "workers started")
        p.send_signal(sig)
        out, err = p.communicate(timeout=10)
        check(p.returncode == 1, f"rc {p.returncode}, want 1 (as torchrun)", err)
        check(sorted(os.listdir(d)) == ["0", "1"], f"every worker got {sig.name}: {os.listdir(d)}", err)
    expect_no_leftovers(m)


def case_sigterm():
    signal_to_distrun(signal.SIGTERM)


def case_sigint():
    signal_to_distrun(signal.SIGINT)


def case_second_signal_kills():
    """Workers that ignore SIGTERM get the stop grace (30 s); a second signal to distrun ends it."""
    m = marker()
    p = subprocess.Popen([DISTRUN, "--nproc", "2", *sh('trap "" TERM; echo ready; while true; do sleep 0.1; done', m)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2):
            p.stdout.readline()
        p.send_signal(signal.SIGTERM)
        seen = ""
        while "waiting for" not in seen and p.poll() is None:
            seen += p.stderr.readline()
        check(re.search(r"waiting for 2 worker\(s\) to stop after SIGTERM; SIGKILL in (29|28) s", seen),
              "the grace is announced", seen)
        t0 = time.time()
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=10)
    finally:
        p.kill()
    check(time.time() - t0 < 5 and p.returncode == 1, f"ended at once: rc {p.returncode}", err)
    check("SIGINT while stopping: SIGKILL to every worker now" in err and "stopped by SIGTERM" in err, "said so", err)
    expect_no_leftovers(m)


def case_killed_launcher_takes_workers():
    m = marker()
    p = subprocess.Popen([DISTRUN, "--nproc", "2", *sh("echo ready; sleep 60", m)], stdout=subprocess.PIPE, text=True)
    for _ in range(2):
        p.stdout.readline()
    p.kill()  # SIGKILL: no chance to forward anything; PR_SET_PDEATHSIG does it
    p.wait(timeout=10)
    expect_no_leftovers(m)


def case_stopped_rank():
    """A frozen (SIGSTOP'ed) rank: its peer fails, distrun stops everyone, even the frozen one,
    and names the frozen rank as stopped, not the peer that gave up on it."""
    m = marker()
    r = distrun("--nproc", "3", "--stop-grace", "0.5",
                *sh('if [ "$RANK" = 1 ]; then kill -STOP $$; fi; '
                    'if [ "$RANK" = 0 ]; then sleep 2; echo "peer 1 timed out" >&2; exit 1; fi; sleep 30', m),
                timeout=30)
    check(r.returncode == 1 and "peer 1 timed out" in r.stderr, f"rc {r.returncode}", r.stderr)
    check("rank       : 1" in r.stderr and "frozen, not ended" in r.stderr and "rank       : 0" not in r.stderr,
          "the summary names the frozen rank 1", r.stderr)
    expect_no_leftovers(m)


# Holds process PID in a tracer's stop ('t' in /proc, as a debugger or a sanitizer's leak check
# at exit does), says so by creating file HELD, and lets it go after SECONDS. PTRACE_SEIZE and
# PTRACE_INTERRUPT send no SIGSTOP, so nothing is left pending when it lets go.
TRACER = """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
pid, seconds, held = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
if libc.ptrace(0x4206, pid, 0, 0) or libc.ptrace(0x4207, pid, 0, 0):
    sys.exit("ptrace: " + os.strerror(ctypes.get_errno()))
os.waitpid(pid, 0x40000000)
open(held, "w").close()
time.sleep(seconds)
libc.ptrace(17, pid, 0, 0)
"""


def case_traced_rank_not_frozen():
    """A rank held by a tracer (a debugger, a leak check at exit) is not frozen: the rank that
    really failed is named, with its own exit code."""
    m = marker()
    tmp = tempfile.mkdtemp()
    tracer, held = os.path.join(tmp, "tracer.py"), os.path.join(tmp, "held")
    with open(tracer, "w") as f:
        f.write(TRACER)
    # Rank 0 fails once rank 1 has been held long enough for distrun to have looked (0.25 s).
    r = distrun("--nproc", "2", "--stop-grace", "0.5",
                *sh(f'if [ "$RANK" = 1 ]; then {PYTHON} {tracer} $$ 20 {held} & sleep 30; fi; '
                    f'for i in $(seq 300); do [ -e {held} ] && break; sleep 0.1; done; sleep 1; '
                    'echo "rank 0 gives up" >&2; exit 3', m),
                timeout=40)
    check(r.returncode == 1 and "rank 0 gives up" in r.stderr, f"rc {r.returncode}", r.stderr)
    check("rank       : 0" in r.stderr and "exit code 3" in r.stderr and "frozen" not in r.stderr,
          "the summary names rank 0's exit, not the traced rank 1", r.stderr)
    expect_no_leftovers(m)


def case_stopped_rank_alone():
    """A rank frozen while the others wait (a program whose collective has no timeout of its
    own): named as stopped after the heartbeat timeout, and every worker stopped."""
    m = marker()
    t0 = time.time()
    r = distrun("--nproc", "2", "--stop-grace", "0.5", "--rdzv-conf", "heartbeat_timeout=2",
                *sh('if [ "$RANK" = 1 ]; then kill -STOP $$; fi; sleep 60', m), timeout=40)
    took = time.time() - t0
    print(f"MEASURE a frozen rank alone: distrun ended {took:.2f} s after it started (heartbeat timeout 2 s)",
          flush=True)
    check(r.returncode == 1 and "rank       : 1" in r.stderr and "frozen, not ended" in r.stderr,
          f"rc {r.returncode}: the frozen rank 1 is named", r.stderr)
    check(took < 20, f"after the heartbeat timeout, not the workers' 60 s: {took:.2f} s")
    expect_no_leftovers(m)


def case_frozen_torch_rank():
    """The same with PyTorch: rank 1 freezes, gloo's timeout fails rank 0, and distrun names the
    frozen rank 1 (rank 0 only gave up on it), with rank 0's own error shown."""
    need_torch()
    m = marker()
    prog = os.path.join(DATA, "torch_frozen.py")
    t0 = time.time()
    r = distrun("--nproc", "2", "--", PYTHON, prog, m, timeout=120)
    check(r.returncode == 1, f"rc {r.returncode}", r.stdout + r.stderr)
    check("rank       : 1" in r.stderr and "frozen, not ended" in r.stderr, "the frozen rank is named", r.stderr)
    check("Timed out" in r.stderr, "the timed-out rank's own error is shown", r.stderr)
    check(time.time() - t0 < 60, "ends after the timeout, not a hang")
    expect_no_leftovers(m)


def case_max_restarts():
    m = marker()
    script = 'echo "attempt $TORCHELASTIC_RESTART_COUNT"; if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 4; fi; sleep 0.2'
    r = distrun("--nproc", "2", "--max-restarts", "1", *sh(script, m))
    check(r.returncode == 0, f"recovered, rc {r.returncode}", r.stderr)
    check("attempt 1" in r.stdout and "restarting" in r.stderr, "restarted once", r.stdout + r.stderr)
    r = distrun("--nproc", "2", "--max-restarts", "2", *sh("exit 4", m))
    check(r.returncode == 1 and r.stderr.count("restarting") == 2, "gives up after 2 restarts", r.stderr)
    expect_no_leftovers(m)


def case_master_port_taken():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        r = distrun("--nproc", "2", "--master-port", str(port), "--", "true", timeout=20)
        check(r.returncode == 2 and "already in use" in r.stderr, f"one node: rc {r.returncode}", r.stderr)
        r = distrun("--nnodes", "2", "--node-rank", "0", "--master-port", str(port), "--rdzv-timeout", "5", "--", "true",
                    timeout=20, env=SECRET)
        check(r.returncode != 0 and "already in use" in r.stderr, f"node 0: rc {r.returncode}", r.stderr)


def case_missing_node_named():
    r = distrun("--nnodes", "3", "--node-rank", "0", "--master-port", str(free_port()), "--rdzv-timeout", "1",
                "--", "true", timeout=30, env=SECRET)
    check(r.returncode == 1 and "node(s) 1, 2 of 3 never joined" in r.stderr, f"rc {r.returncode}", r.stderr)


def case_two_agents_one_host():
    """Two agents on one host: static rendezvous, ranks 0..3, one MASTER_PORT for the workers."""
    port = str(free_port())
    common = ["--nnodes", "2", "--nproc", "2", "--master-addr", "127.0.0.1", "--master-port", port, "--rdzv-timeout", "20"]
    p1 = subprocess.Popen([DISTRUN, *common, "--node-rank", "1", "--", PYTHON, "-c", DUMP_ENV], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, **SECRET))
    r0 = distrun(*common, "--node-rank", "0", "--", PYTHON, "-c", DUMP_ENV, timeout=40, env=SECRET)
    out1, err1 = p1.communicate(timeout=40)
    check(r0.returncode == 0 and p1.returncode == 0, f"rc {r0.returncode}/{p1.returncode}", r0.stderr + err1)
    envs = envs_from(r0.stdout + out1)
    check([e["RANK"] for e in envs] == ["0", "1", "2", "3"], "global ranks", r0.stdout + out1)
    check({e["WORLD_SIZE"] for e in envs} == {"4"} and len({e["MASTER_PORT"] for e in envs}) == 1, "one world")
    check([e["GROUP_RANK"] for e in envs] == ["0", "0", "1", "1"], "group ranks")
    check(all(e["MASTER_PORT"] != port for e in envs), "workers do not get the agents' port")


def case_log_dir():
    with tempfile.TemporaryDirectory() as d:
        script = 'echo "out of $RANK"; echo "err of $RANK" >&2'
        r = distrun("--nproc", "2", "--log-dir", d, "--run-id", "r9", "--redirects", "3", *sh(script, marker()))
        check(r.returncode == 0, f"rc {r.returncode}", r.stderr)
        runs = [x for x in os.listdir(d) if x.startswith("r9_")]  # a fresh RUN_ID_XXXXXXXX per run
        check(len(runs) == 1, f"one run folder: {os.listdir(d)}")
        for rank in (0, 1):
            base = os.path.join(d, runs[0], "attempt_0", str(rank))
            with open(os.path.join(base, "stdout.log")) as f:
                check(f.read() == f"out of {rank}\n", "stdout.log content")
            with open(os.path.join(base, "stderr.log")) as f:
                check(f.read() == f"err of {rank}\n", "stderr.log content")
        check("out of" not in r.stdout and "err of" not in r.stderr, "redirected: nothing on the console",
              r.stdout + r.stderr)
        r = distrun("--nproc", "2", "--log-dir", d, "--run-id", "t", "--redirects", "3", "--tee", "0:1", *sh(script, marker()))
        check(r.stdout.strip() == "out of 0" and "err of" not in r.stderr, "tee of rank 0's stdout only",
              r.stdout + r.stderr)
        runs = [x for x in os.listdir(d) if x.startswith("t_")]
        check(len(runs) == 1 and os.path.exists(os.path.join(d, runs[0], "attempt_0", "1", "stderr.log")),
              "files still written")
        # As torchrun: a log file only for a stream --redirects/--tee names; error files always.
        script = ('echo "out of $RANK"; echo "err of $RANK" >&2; '
                  'if [ "$RANK" = 1 ]; then echo \'{"message": "recorded"}\' > "$TORCHELASTIC_ERROR_FILE"; exit 4; fi')
        for run_id, extra, want in [("plain", [], []), ("r1", ["-r", "1"], ["stdout.log"]),
                                    ("t2", ["-t", "2"], ["stderr.log"])]:
            r = distrun("--nproc", "2", "--log-dir", d, "--run-id", run_id, *extra, *sh(script, marker()))
            check(r.returncode == 1 and "error      : recorded" in r.stderr, f"{run_id}: rc {r.returncode}", r.stderr)
            run_dir = os.path.join(d, next(x for x in os.listdir(d) if x.startswith(run_id + "_")), "attempt_0")
            check(sorted(os.listdir(os.path.join(run_dir, "0"))) == want and
                  sorted(os.listdir(os.path.join(run_dir, "1"))) == sorted(want + ["error.json"]),
                  f"{run_id}: files {[sorted(os.listdir(os.path.join(run_dir, x))) for x in ('0', '1')]}, want {want}")
            check(f"error file : {run_dir}/1/error.json" in r.stderr, "the summary names the error file", r.stderr)


def case_local_ranks_filter():
    r = distrun("--nproc", "3", "--local-ranks-filter", "1,2", *sh('echo "hi $RANK"; echo "e $RANK" >&2', marker()))
    check(r.returncode == 0, f"rc {r.returncode}", r.stderr)
    check(sorted(r.stdout.splitlines()) == ["[rank1]:hi 1", "[rank2]:hi 2"], "stdout filtered", r.stdout)
    check(sorted(l for l in r.stderr.splitlines() if "]:e " in l) == ["[rank1]:e 1", "[rank2]:e 2"], "stderr filtered",
          r.stderr)


def case_bad_command_lines():
    # The rendezvous' own refusals: etcd without its cluster, a list of members for another backend.
    env = dict(os.environ, DISTRUN_STORE_SECRET=os.urandom(16).hex())
    for args, want in [(["--bogus"], "unknown option"), (["--nproc", "x", "--", "true"], "--nproc-per-node"),
                       (["--redirects", "9", "--", "true"], "--redirects"), (["--", "/nonexistent/prog"], "cannot run"),
                       (["--rdzv-backend", "etcd", "--nnodes", "1:2", "--", "true"], "needs --rdzv-endpoint"),
                       (["--rdzv-backend", "etcd", "--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:2379", "--", "true"],
                        "an elastic --nnodes"),
                       (["--nnodes", "2", "--rdzv-endpoint", "127.0.0.1:2379,127.0.0.2:2379", "--", "true"],
                        "a list of members is an etcd cluster's")]:
        r = distrun(*args, env=env)
        check(r.returncode == 2 and want in r.stderr and r.stderr.startswith("distrun: error: "),
              f"{args}: rc {r.returncode}", r.stderr)


def case_pytorch_program():
    need_torch()
    prog = os.path.join(DATA, "torch_allreduce.py")
    r = distrun("--nproc-per-node", "4", "--", PYTHON, prog, timeout=180)
    check(r.returncode == 0, f"rc {r.returncode}", r.stdout + r.stderr)
    check("all_reduce ok: 10.0" in r.stdout, "rank 0 saw the sum", r.stdout)
    check(r.stdout.count("all_gather_object ok") == 4, "every rank gathered objects", r.stdout + r.stderr)


def case_scenario_mode():
    need_worker()
    scen = os.path.join(DATA, "all_reduce_4.yaml")
    r = distrun("--check", scen)
    check(r.returncode == 0, f"--check rc {r.returncode}", r.stderr)
    with tempfile.TemporaryDirectory() as d:
        res = os.path.join(d, "r.jsonl")
        r = distrun("--results", res, scen, timeout=60)
        check(r.returncode == 0, f"rc {r.returncode}", r.stdout + r.stderr)
        check("Rank 0" in r.stdout and "Rank 3" in r.stdout, "ordered results on stdout", r.stdout)
        with open(res) as f:
            recs = [json.loads(l) for l in f]
        check(len(recs) == 4 and all(x["wrong"] == 0 for x in recs), "four records, nothing wrong", str(recs))
    r = distrun("--nproc", "3", scen)
    check(r.returncode == 2, f"world_size mismatch rc {r.returncode}", r.stderr)
    bad = os.path.join(DATA, "bad_op.yaml")
    r = distrun(bad)
    check(r.returncode == 2 and "bad_op.yaml:" in r.stderr, f"bad scenario rc {r.returncode}", r.stderr)


def case_nccl_refused_before_launch():
    """What NCCL cannot do (int16, bitwise reductions) is refused by the launcher's check, with
    file:line:col and exit 2, before any worker starts: no GPU is needed to know it."""
    need_worker()
    with tempfile.TemporaryDirectory() as d:
        def scenario(name, text):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            return path

        int16 = scenario("int16.yaml", "tensors:\n  x: {shape: [4], dtype: int16, fill: rank}\n"
                                       "steps:\n  - op: barrier\n  - {op: all_reduce, input: x}\n")
        want = f"distrun: error: {int16}:5:29: step 1 (all_reduce): backend nccl has no type for dtype int16"
        for args in (["--backend", "nccl"], ["--check", "--backend", "nccl"], ["--backend", "auto", "--device", "cuda"]):
            r = distrun("--nproc-per-node", "2", *args, int16, timeout=60)
            # A worker would have failed on its own (no GPU here, or NCCL's refusal) with other words.
            check(r.returncode == 2 and r.stderr.startswith(want), f"int16 with {args}: rc {r.returncode}", r.stderr)
        band = scenario("band.yaml", "backend: nccl\ntensors:\n  x: {shape: [4], dtype: int32, fill: rank}\n"
                                     "steps:\n  - {op: all_reduce, input: x, reduce: band}\n")
        r = distrun("--nproc-per-node", "2", band, timeout=60)
        check(r.returncode == 2 and r.stderr.startswith(f"distrun: error: {band}:5:40: step 0 (all_reduce): backend "
                                                         "nccl does not support reduce op 'band'"),
              f"band on nccl: rc {r.returncode}", r.stderr)
        # Gloo carries both; NCCL carries an int32 sum: the check passes without a GPU.
        for path, args in ((int16, []), (band, ["--backend", "gloo"]), (int16, ["--backend", "gloo"])):
            r = distrun("--check", "--nproc-per-node", "2", *args, path, timeout=60)
            check(r.returncode == 0, f"{os.path.basename(path)} {args} --check: rc {r.returncode}", r.stderr)
        sum32 = scenario("sum32.yaml", "tensors:\n  x: {shape: [4], dtype: int32}\nsteps:\n  - {op: all_reduce, input: x}\n")
        r = distrun("--check", "--nproc-per-node", "2", "--backend", "nccl", sum32, timeout=60)
        check(r.returncode == 0, f"int32 sum on nccl --check: rc {r.returncode}", r.stderr)


def case_frozen_scenario_rank():
    """A frozen distrun-worker (SIGSTOP) with a short --timeout: a clear report, nothing left."""
    need_worker()
    scen = os.path.join(DATA, "slow_all_reduce_2.yaml")
    p = subprocess.Popen([DISTRUN, "--timeout", "2", scen], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # The workers start through the reaper shim, later under a sanitizer or load: wait for them.
    deadline = time.monotonic() + 30
    kids = []
    while not kids and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.1)
        kids = [pid for pid, cmd in __import__("launcher_harness").processes_with("slow_all_reduce_2.yaml")
                if "distrun-worker" in cmd]
    check(len(kids) >= 1, "workers running")
    os.kill(max(kids), signal.SIGSTOP)
    out, err = p.communicate(timeout=60)
    check(p.returncode == 1 and "worker failed" in err, f"rc {p.returncode}", out + err)
    expect_no_leftovers("slow_all_reduce_2.yaml")


if __name__ == "__main__":
    main({k[5:]: v for k, v in globals().items() if k.startswith("case_")})

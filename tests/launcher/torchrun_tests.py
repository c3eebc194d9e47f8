"""distrun as a drop-in for torchrun: the same command lines against /usr/bin/torchrun (Debian's
torch 1.13), Python programs, @record error files, streaming output, stdin under a pty, signals,
torchrun's options and the log folder. Real processes; the process table is checked.
Usage: DISTRUN=build/bin/distrun torchrun_tests.py CASE"""
import errno
import fcntl
import glob
import json
import os
import pty
import re
import resource
import select
import signal
import struct
import subprocess
import tempfile
import termios
import time
import uuid

from launcher_harness import (DATA, DISTRUN, PYTHON, Failed, check, cmdline_and_state, distrun, expect_no_leftovers,
                              free_port, main, need_torch, processes_with, run, skip)

TORCHRUN = "/usr/bin/torchrun"
# Debian's python3 for every *.py program distrun starts (a python3 earlier on PATH may lack torch).
PY_ENV = {"PYTHON": PYTHON, "PYTHON_EXEC": None}


# No $PYTHON: distrun picks the interpreter itself (torchrun's, else a python3 that finds torch).
AUTO_PYTHON_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHON", "PYTHON_EXEC")}


def marker():
    return "distrun-tr-" + uuid.uuid4().hex[:12]


def need_torchrun():
    need_torch()
    if not os.access(TORCHRUN, os.X_OK):
        skip(f"{TORCHRUN} is not installed (python3-torch)")


def torchrun_args(port, log_dir):
    # torch 1.13 spells options with underscores only, and under Python 3.11 its launcher
    # fails unless both streams are redirected and tee'd (-r 1 -t 1 is what runs here).
    return ["--nproc_per_node", "2", "-r", "1", "-t", "1", "--master_port", str(port), "--log_dir", log_dir]


def read_envs(folder):
    envs = {}
    for path in glob.glob(os.path.join(folder, "env_*.json")):
        with open(path) as f:
            e = json.load(f)
        envs[int(e["RANK"])] = e
    return envs


# What distrun's workers get that torchrun 1.13's do not, and the reverse (docs/launcher.md).
ONLY_DISTRUN = {"DISTRUN_STORE_SECRET", "PYTHONUNBUFFERED", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "GLOO_SOCKET_IFNAME",
                "NCCL_SOCKET_IFNAME", "DISTRUN_FLIGHT_RECORDER"}
ONLY_TORCHRUN = {"TORCHELASTIC_USE_AGENT_STORE"}  # torchrun's workers use its agent's store; distrun's rank 0 hosts one
ERROR_FILE = re.compile(r"/none_[0-9a-z_]+/attempt_0/(\d)/error.json$")


def case_env_vs_torchrun():
    """The same command line under torchrun and distrun: the same worker environment."""
    need_torchrun()
    with tempfile.TemporaryDirectory() as d:
        got = {}
        port = free_port()  # the same command line, one run after the other
        for tool in ("torchrun", "distrun"):
            out, logs = os.path.join(d, tool), os.path.join(d, tool + "_logs")
            os.mkdir(out)
            exe = TORCHRUN if tool == "torchrun" else DISTRUN
            r = run([exe, *torchrun_args(port, logs), os.path.join(DATA, "dump_env.py"), out], timeout=120,
                    env={**PY_ENV, "OMP_NUM_THREADS": None, "PYTHONUNBUFFERED": None, "GLOO_SOCKET_IFNAME": None,
                         "NCCL_SOCKET_IFNAME": None, "TORCHELASTIC_ERROR_FILE": None})
            check(r.returncode == 0, f"{tool}: rc {r.returncode}", r.stdout + r.stderr)
            got[tool] = read_envs(out)
            check(sorted(got[tool]) == [0, 1], f"{tool}: two workers wrote their environment", r.stdout + r.stderr)
        for rank in (0, 1):
            t, dr = got["torchrun"][rank], got["distrun"][rank]
            check(set(dr) - set(t) == ONLY_DISTRUN, f"rank {rank}: only in distrun: {sorted(set(dr) - set(t))}")
            check(set(t) - set(dr) == ONLY_TORCHRUN, f"rank {rank}: only in torchrun: {sorted(set(t) - set(dr))}")
            differ = sorted(k for k in set(t) & set(dr) if t[k] != dr[k] and k not in ("_", "TORCHELASTIC_ERROR_FILE"))
            check(differ == [], f"rank {rank}: values differ: " + ", ".join(f"{k}: {t[k]!r} vs {dr[k]!r}" for k in differ))
            for tool, e in (("torchrun", t), ("distrun", dr)):
                m = ERROR_FILE.search(e["TORCHELASTIC_ERROR_FILE"])
                check(m and m.group(1) == str(rank) and e["TORCHELASTIC_ERROR_FILE"].startswith(d),
                      f"{tool}: error file LOG_DIR/none_XXXX/attempt_0/{rank}/error.json: {e['TORCHELASTIC_ERROR_FILE']}")
            check(dr["GLOO_SOCKET_IFNAME"] == "lo" and dr["PYTHONUNBUFFERED"] == "1", "lo routes to 127.0.0.1")


def case_ddp_same_params():
    """A 2-rank DDP job for a few steps: the same parameters under torchrun and distrun."""
    need_torchrun()
    with tempfile.TemporaryDirectory() as d:
        for tool, exe in (("torchrun", TORCHRUN), ("distrun", DISTRUN)):
            r = run([exe, *torchrun_args(free_port(), os.path.join(d, tool + "_logs")),
                     os.path.join(DATA, "ddp_train.py"), os.path.join(d, tool + ".pt")], timeout=180, env=PY_ENV)
            check(r.returncode == 0, f"{tool}: rc {r.returncode}", r.stdout + r.stderr)
        cmp = run([PYTHON, "-c", "import sys, torch; a, b = (torch.load(p) for p in sys.argv[1:]); "
                   "print(len(a), all(torch.equal(x, y) for x, y in zip(a, b)), float(a[0].abs().sum()))",
                   os.path.join(d, "torchrun.pt"), os.path.join(d, "distrun.pt")])
        check(cmp.returncode == 0 and cmp.stdout.split()[:2] == ["4", "True"], "equal parameters", cmp.stdout + cmp.stderr)


def case_record_failure():
    """@record's error.json gives the summary its root cause, though 25 noise lines follow it."""
    need_torch()
    with tempfile.TemporaryDirectory() as d:
        agent_file = os.path.join(d, "agent.json")
        prog = os.path.join(DATA, "record_fail.py")
        r = distrun("--nproc-per-node", "2", prog, timeout=120, env={**PY_ENV, "TORCHELASTIC_ERROR_FILE": agent_file})
        check(r.returncode == 1, f"rc {r.returncode}", r.stderr)
        summary = r.stderr[r.stderr.find("distrun: error: worker failed:"):]
        check(summary.startswith(f"distrun: error: worker failed: {prog}\n"), "names the script, not python", summary)
        for want in ["rank       : 1 (local_rank 1)", "error      : ValueError: the root cause: bad shard 17",
                     'raise ValueError("the root cause: bad shard 17")']:
            check(want in summary, f"summary lacks {want!r}", r.stderr)
        check(r.stderr.count("teardown noise") == 25 and "teardown noise" not in summary,
              "the noise is on the console but not in the summary", r.stderr)
        with open(agent_file) as f:
            agent = json.load(f)["message"]
        check(agent["message"] == "ValueError: the root cause: bad shard 17" and agent["errorCode"] == 1
              and "record_fail.py" in agent["extraInfo"]["py_callstack"], "agent-level error file", json.dumps(agent))
        # Without an error file (a plain program), the stderr tail is the fallback.
        r = distrun("--nproc", "2", "--", "sh", "-c", 'if [ "$RANK" = 1 ]; then echo "tail words" >&2; exit 3; fi')
        check(r.returncode == 1 and "stderr (last 1 lines):\n    tail words" in r.stderr, "stderr fallback", r.stderr)


def read_until(fd, want, timeout, sofar=b""):
    """Reads `fd` until `want` (bytes) appears; returns everything read. Fails on timeout."""
    deadline = time.time() + timeout
    data = sofar
    while want not in data:
        left = deadline - time.time()
        check(left > 0, f"timed out waiting for {want!r}", data.decode(errors="replace"))
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError as e:  # a pty's master reads EIO once the other side is gone
                if e.errno != errno.EIO:
                    raise
                chunk = b""
            check(chunk, f"end of output before {want!r}", data.decode(errors="replace"))
            data += chunk
    return data


def case_unbuffered_survive_stop():
    """Python workers' lines arrive as printed (python -u), a \\r update at once after its prefix,
    and nothing printed before a stop is lost."""
    m = marker()
    p = subprocess.Popen([DISTRUN, "--nproc", "2", os.path.join(DATA, "progress.py"), m], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env={**os.environ, "PYTHON": PYTHON})
    try:
        out = read_until(p.stdout.fileno(), b"[rank1]:progress 1 50%\r", 60)
        out = read_until(p.stdout.fileno(), b"progress 0 50%\r", 30, out)
        p.send_signal(signal.SIGTERM)
        rest, err = p.communicate(timeout=20)
    finally:
        p.kill()
    out += rest
    text = out.decode()
    for rank in (0, 1):
        for i in range(3):
            line = f"line {i} of rank {rank}\n"
            check((line if rank == 0 else f"[rank1]:{line}") in text, f"kept {line!r}", text)
    check(p.returncode == 1, f"rc {p.returncode}", err.decode())
    check("stopped by SIGTERM" in err.decode(), "summary after the stop", err.decode())
    expect_no_leftovers(m)


def case_pty_stdin():
    """Under a terminal, local rank 0 reads a typed line; rank 1 reads EOF; nobody gets SIGTTIN."""
    m = marker()
    pid, fd = pty.fork()
    if pid == 0:  # the child: distrun as the session leader of a fresh terminal
        os.execve(DISTRUN, [DISTRUN, "--nproc", "2", os.path.join(DATA, "read_stdin.py"), m],
                  {**os.environ, "PYTHON": PYTHON})
    try:
        out = read_until(fd, b"prompt>", 60)
        out = read_until(fd, b"eof: ''", 30, out)
        os.write(fd, b"hello distrun\n")
        out = read_until(fd, b"got: hello distrun", 30, out)
        deadline = time.time() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            check(time.time() < deadline, "distrun ended", out.decode(errors="replace"))
            try:
                out += os.read(fd, 65536) if select.select([fd], [], [], 0.1)[0] else b""
            except OSError:
                pass
        check(os.waitstatus_to_exitcode(status) == 0, f"status {status}", out.decode(errors="replace"))
        check(b"[rank1]:eof: ''" in out, "rank 1 read EOF", out.decode(errors="replace"))
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass
        os.close(fd)
    expect_no_leftovers(m)


def stop_with(sig, extra=(), want_rc=None):
    m = marker()
    with tempfile.TemporaryDirectory() as d:
        script = f'trap "echo got > {d}/$RANK; exit 5" {sig.name[3:]}; echo ready; while true; do sleep 0.1; done'
        p = subprocess.Popen([DISTRUN, *extra, "--nproc", "2", "--", "sh", "-c", script + " # " + m],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            seen, deadline = 0, time.time() + 20
            while seen < 2 and time.time() < deadline:
                seen += "ready" in p.stdout.readline()
            check(seen == 2, "workers started")
            p.send_signal(sig)
            out, err = p.communicate(timeout=20)
        finally:
            p.kill()
        check(p.returncode == want_rc, f"{sig.name}: rc {p.returncode}, want {want_rc}", err)
        if want_rc > 0:
            check(sorted(os.listdir(d)) == ["0", "1"], f"every worker got {sig.name}: {os.listdir(d)}", err)
            check(f"stopped by {sig.name}" in err and "rank 1     : exit code 5" in err, "summary", err)
    expect_no_leftovers(m)


def case_signals():
    """torchrun's --signals-to-handle: SIGQUIT and SIGHUP by default, SIGUSR1 when listed; a signal
    not handled kills distrun as it would torchrun, and its workers still go with it."""
    stop_with(signal.SIGQUIT, want_rc=1)  # exit 1 after a handled signal, as torchrun
    stop_with(signal.SIGHUP, want_rc=1)
    stop_with(signal.SIGUSR1, ["--signals-to-handle", "SIGTERM,SIGUSR1"], want_rc=1)
    stop_with(signal.SIGUSR2, want_rc=-signal.SIGUSR2)


def case_checkpoint_on_stop():
    """A PyTorch job whose SIGTERM handler takes 4 s to save a checkpoint: with torchrun's 30 s
    stop grace, both ranks save it when distrun is stopped, and rank 0 saves it when rank 1 fails,
    while the failure summary arrives at once, before the save ends."""
    need_torch()
    for failing in (-1, 1):
        m = marker()
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.Popen([DISTRUN, "--nproc", "2", os.path.join(DATA, "checkpoint_on_stop.py"), d, "4",
                                  str(failing), m], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=AUTO_PYTHON_ENV)
            try:
                out = read_until(p.stdout.fileno(), b"ready 0", 90)
                out = read_until(p.stdout.fileno(), b"ready 1", 30, out)
                if failing < 0:
                    p.send_signal(signal.SIGTERM)
                else:
                    err = read_until(p.stderr.fileno(), b"error file : ", 30)
                    check(not os.path.exists(os.path.join(d, "ckpt0.pt")), "the summary came before the save ended",
                          err.decode())
                rest, more_err = p.communicate(timeout=60)
                if failing >= 0:
                    more_err = err + more_err
                    check(b"worker failed:" in more_err and b"(pid " in more_err and b"python     : " in more_err
                          and b"worker(s) to stop after SIGTERM; SIGKILL in" in more_err, "summary, then the wait told",
                          more_err.decode())
            finally:
                p.kill()
            want = [0, 1] if failing < 0 else [0]
            saved = sorted(int(f[4]) for f in os.listdir(d) if f.endswith(".pt"))
            check(saved == want, f"failing rank {failing}: checkpoints of ranks {saved}, want {want}",
                  (out + rest).decode() + more_err.decode())
            check(p.returncode == 1, f"rc {p.returncode} (1, as torchrun)", more_err.decode())
        expect_no_leftovers(m)


def in_terminal(args, columns, env=None):
    """Starts `args` as the session leader of a new pseudo-terminal of `columns` x 40, as a shell
    would in a terminal window; returns (process, master fd)."""
    master, slave = os.openpty()
    fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))

    def own_terminal():
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    p = subprocess.Popen(args, stdin=slave, stdout=slave, stderr=slave, preexec_fn=own_terminal,
                         env={**os.environ, **(env or {})})
    os.close(slave)
    return p, master


def drain(p, fd, timeout):
    """Everything `fd` (a terminal's master) shows until `p` ends; its text without \r."""
    data, deadline = b"", time.time() + timeout
    while True:
        ready = select.select([fd], [], [], 0.1)[0]
        chunk = b""
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError as e:
                if e.errno != errno.EIO:
                    raise
        data += chunk
        if not chunk and p.poll() is not None:
            break
        if time.time() > deadline:
            p.kill()
            raise Failed("timed out: " + data.decode(errors="replace"))
    os.close(fd)
    return data.decode(errors="replace").replace("\r", "")


def case_terminal_as_alone():
    """In a 150-column terminal each rank sees a terminal of 150 columns, as the program alone
    does; a resized window reaches every rank (SIGWINCH); the rank prefix stays."""
    m = marker()
    probe = [PYTHON, os.path.join(DATA, "terminal_probe.py")]
    p, fd = in_terminal(probe, 150)
    alone = drain(p, fd, 30)
    check("start isatty True True columns 150" in alone, "the program alone", alone)
    p, fd = in_terminal([DISTRUN, "--nproc", "2", "--", *probe, "winch", m], 150)
    out = read_until(fd, b"[rank1]:start", 30)
    deadline = time.time() + 30
    while not re.search(rb"(^|\n)start ", out):  # rank 0's line, unprefixed
        check(time.time() < deadline, "rank 0 started", out.decode(errors="replace"))
        if select.select([fd], [], [], 0.5)[0]:
            out += os.read(fd, 65536)
    # Both have blocked SIGWINCH before printing: the resize cannot come too early.
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
    text = out.decode(errors="replace").replace("\r", "") + drain(p, fd, 30)
    check(p.returncode == 0, f"rc {p.returncode}", text)
    lines = text.splitlines()
    for rank_prefix in ("", "[rank1]:"):
        for want in ("start isatty True True columns 150", "resized isatty True True columns 100"):
            check(rank_prefix + want in lines, f"{rank_prefix or 'rank 0'}: {want}", text)
    expect_no_leftovers(m)


def case_terminal_order():
    """Under a terminal one rank's stdout and stderr keep their order, in every one of 20 runs."""
    script = 'for i in 1 2 3 4 5 6 7 8 9 10; do echo "out $i"; echo "err $i" >&2; done'
    want = [f"{s} {i}" for i in range(1, 11) for s in ("out", "err")]
    for run_no in range(20):
        p, fd = in_terminal([DISTRUN, "--nproc", "2", "--", "sh", "-c", script], 120)
        text = drain(p, fd, 30)
        check(p.returncode == 0, f"run {run_no}: rc {p.returncode}", text)
        lines = [line for line in text.splitlines() if not line.startswith("distrun: ")]
        rank0 = [line for line in lines if not line.startswith("[rank1]:")]
        rank1 = [line[len("[rank1]:"):] for line in lines if line.startswith("[rank1]:")]
        check(rank0 == want and rank1 == want, f"run {run_no}: each rank's lines in order", text)


def case_job_control():
    """In an interactive shell, Ctrl-Z stops every worker with distrun, and fg resumes them all."""
    m = marker()
    with tempfile.TemporaryDirectory() as d:
        # Each worker counts in its file (replaced whole, so never read half written) until told to finish.
        script = (f'i=0; while [ ! -e {d}/finish ]; do i=$((i+1)); echo $i > {d}/next$RANK; '
                  f'mv {d}/next$RANK {d}/count$RANK; sleep 0.05; done; echo finished # {m}')
        p, fd = in_terminal(["bash", "--norc", "--noprofile", "-i"], 120, env={"PS1": "$ "})

        def counts():
            try:
                return [open(os.path.join(d, f"count{r}")).read().strip() for r in (0, 1)]
            except OSError:
                return None

        def wait_for(cond, what, timeout=20):
            deadline = time.time() + timeout
            while not cond():
                check(time.time() < deadline, what)
                time.sleep(0.05)

        def states():  # pid: (command line, state); a process may end between the listing and the look
            found = {}
            for pid, _ in processes_with(m):
                try:
                    found[pid] = cmdline_and_state(pid)
                except OSError:
                    pass
            return found

        def all_stopped():
            # T: stopped; D: a shell waiting in vfork for its stopped child, which cannot run either.
            st = states()
            launcher = [state for cmd, state in st.values() if cmd.startswith(DISTRUN)]
            workers = [state for cmd, state in st.values() if not cmd.startswith(DISTRUN)]
            return launcher == ["T"] and len(workers) >= 2 and set(workers) <= {"T", "D"}

        try:
            os.write(fd, f"{DISTRUN} --nproc 2 -- sh -c '{script}'\n".encode())
            wait_for(lambda: counts() and all(counts()), "both workers count")
            os.write(fd, b"\x1a")  # Ctrl-Z
            out = read_until(fd, b"Stopped", 20)
            deadline = time.time() + 5
            while not all_stopped():
                check(time.time() < deadline, f"distrun and every worker stopped: {states()}")
                time.sleep(0.05)
            before = counts()
            time.sleep(0.5)
            check(counts() == before, f"no worker counted while stopped: {before} then {counts()}")
            os.write(fd, b"fg; echo rc=$?\n")
            wait_for(lambda: all(int(a) > int(b) for a, b in zip(counts(), before)), "fg resumed every worker", 10)
            open(os.path.join(d, "finish"), "w").close()
            out = read_until(fd, b"rc=0\r", 30, out)
            check(b"\nfinished\r" in out and b"\n[rank1]:finished\r" in out, "both workers finished",
                  out.decode(errors="replace"))
            os.write(fd, b"exit\n")
            drain(p, fd, 10)
        finally:
            p.kill()
    expect_no_leftovers(m)


def case_one_rank_no_prefix():
    """One rank: its output carries no prefix (torchrun's shows none), unless --tee asks."""
    r = distrun("--nproc", "1", "--", "sh", "-c", "echo to-out; echo to-err >&2")
    check(r.returncode == 0 and r.stdout == "to-out\n" and "to-err\n" in r.stderr and "[rank0]" not in r.stderr,
          "no prefix", r.stdout + r.stderr)
    with tempfile.TemporaryDirectory() as d:
        r = distrun("--nproc", "1", "--log-dir", d, "--tee", "3", "--", "sh", "-c", "echo to-out; echo to-err >&2")
        check(r.returncode == 0 and "[rank0]:to-err" in r.stderr, "--tee: prefixed", r.stdout + r.stderr)
    r = distrun("--nproc", "2", "--", "sh", "-c", "echo to-err >&2")
    check("[rank0]:to-err" in r.stderr and "[rank1]:to-err" in r.stderr, "two ranks: prefixed", r.stderr)


def case_small_details():
    """torchrun's small habits: --standalone's uuid run id and localhost, the OMP_NUM_THREADS
    warning, argparse's abbreviations, a plain --max-restarts message, a recovered restart told
    without an error, PROGRAM in --help; and two one-node jobs side by side (distinct free ports)."""
    show = ["--", PYTHON, "-c", "import os; print('ID', os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'], "
            "os.environ['TORCHELASTIC_RUN_ID'])"]
    r = distrun("--standalone", "--nproc_per", "2", *show, env={"OMP_NUM_THREADS": None})
    ids = {tuple(line.split()[1:]) for line in lines_with(r.stdout, "ID ")}
    check(r.returncode == 0 and len(ids) == 1, f"both ranks alike: rc {r.returncode}", r.stdout + r.stderr)
    addr, port, run_id = ids.pop()
    check(addr == "localhost" and re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", run_id),
          f"--standalone: localhost and a uuid4: {addr} {run_id}")
    check("setting OMP_NUM_THREADS=1 for each of the 2 workers" in r.stderr, "the OMP_NUM_THREADS warning", r.stderr)
    for args, env in ((["--nproc", "2"], {"OMP_NUM_THREADS": "4"}), (["--nproc", "1"], {"OMP_NUM_THREADS": None})):
        r = distrun(*args, "--", "true", env=env)
        check(r.returncode == 0 and "OMP_NUM_THREADS" not in r.stderr, f"{args} {env}: no warning", r.stderr)
    # Two jobs on one host at once: each one-node job takes a free port (torchrun's fixed 29500
    # would fail the second).
    jobs = [subprocess.Popen([DISTRUN, "--nproc", "2", "--", PYTHON, "-c", "import os, time; time.sleep(1); "
                              "print('PORT', os.environ['MASTER_PORT'])"], stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    outs = [j.communicate(timeout=60)[0] for j in jobs]
    ports = [set(line.split()[-1] for line in lines_with(o, "PORT")) for o in outs]
    check([j.returncode for j in jobs] == [0, 0] and all(len(p) == 1 for p in ports) and ports[0] != ports[1],
          f"two jobs side by side: rc {[j.returncode for j in jobs]}, ports {ports}", str(outs))
    r = distrun("--max-restarts", "-1", "--", "true")
    check(r.returncode == 2 and "expected a whole number from 0 to 1000000, got -1" in r.stderr and len(r.stderr) < 300,
          "a plain --max-restarts message", r.stderr)
    r = distrun("--n", "2", "--", "true")
    check(r.returncode == 2 and "ambiguous option: --n could match" in r.stderr, "an ambiguous prefix", r.stderr)
    r = distrun("--nproc", "2", "--max-restarts", "1", "--", "sh", "-c",
                'if [ "$RANK$TORCHELASTIC_RESTART_COUNT" = 10 ]; then echo first try fails >&2; exit 3; fi')
    check(r.returncode == 0 and "worker failed:" in r.stderr and "restarting all workers" in r.stderr
          and "error" not in r.stderr.replace("error file", ""), "a recovered restart is no error", r.stderr)
    r = distrun("--help")
    check(r.returncode == 0 and "distrun [OPTIONS] [--] PROGRAM [ARGS...]" in r.stdout, "--help shows PROGRAM", r.stdout)
    # A script without .py in the current folder runs through python, as torchrun runs it; -v
    # names the interpreter distrun chose.
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "train"), "w") as f:
            f.write("import sys; print('train under', sys.executable)\n")
        r = run([DISTRUN, "-v", "train"], cwd=d, env={"PYTHON": None, "PYTHON_EXEC": None}, timeout=60)
        chosen = re.search(r"distrun: python: (\S+) \(", r.stderr)
        check(r.returncode == 0 and chosen and f"train under {chosen.group(1)}" in r.stdout
              and f"each worker runs: {chosen.group(1)} -u train" in r.stderr, f"train: rc {r.returncode}",
              r.stdout + r.stderr)


def lines_with(text, word):
    return sorted(l for l in text.splitlines() if word in l)


def case_torchrun_options():
    """torchrun's options with their meaning, PET_* defaults, and clear refusals."""
    # One write per line: this case checks the exact lines, not the holding of a line written
    # in pieces, which a loaded host can stretch past its bound.
    dump = [PYTHON, "-c", "import os, sys; sys.stdout.write(' '.join(['ID', os.environ['RANK'], "
            "os.environ['WORLD_SIZE'], os.environ['ROLE_NAME'], os.environ['TORCHELASTIC_RUN_ID']]) + '\\n')"]
    r = distrun("--", *dump, env={"PET_NPROC_PER_NODE": "3", "PET_ROLE": "pet_role"})
    check(r.returncode == 0 and len(lines_with(r.stdout, "ID ")) == 3 and "pet_role" in r.stdout,
          "PET_NPROC_PER_NODE and PET_ROLE", r.stdout + r.stderr)
    r = distrun("--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0", "--rdzv-id", "job9",
                "--rdzv-conf", "join_timeout=5,read_timeout=60,last_call_timeout=2", "--monitor-interval", "0.5",
                "--start-method", "fork", "--role", "trainer", "--local-addr", "127.0.0.1", "--", *dump)
    check(r.returncode == 0 and lines_with(r.stdout, "ID ") == ["ID 0 2 trainer job9", "[rank1]:ID 1 2 trainer job9"],
          f"c10d endpoint port 0, rdzv conf: rc {r.returncode}", r.stdout + r.stderr)
    # *.py through $PYTHON with -u, -m MODULE, --run-path, --no-python.
    hello = os.path.join(DATA, "pkg_mod", "hello.py")
    for args, cwd, want in [([hello], None, "module rank 0 name __main__ unbuffered 1"),
                            (["-m", "pkg_mod.hello"], DATA, "module rank 0 name __main__"),
                            (["--run-path", hello], None, "module rank 0 name __main__"),
                            (["--no-python", "/bin/echo", "plain"], None, "plain")]:
        r = run([DISTRUN, *args], env=PY_ENV, cwd=cwd, timeout=60)
        check(r.returncode == 0 and want in r.stdout, f"{args}: rc {r.returncode}", r.stdout + r.stderr)
    r = distrun(hello, env={"PYTHON": "/nonexistent/python"})
    check(r.returncode == 2 and "cannot run '/nonexistent/python'" in r.stderr, "a missing $PYTHON is named", r.stderr)
    for args, want in [(["--rdzv-backend", "etcd"], "--rdzv-backend"), (["--nnodes", "3:2"], "MIN is larger than MAX"),
                       (["--logs-specs", "x"], "no logs_specs plugins"), (["--signals-to-handle", "SIGFOO"], "SIGFOO"),
                       (["--rdzv-conf", "bogus=1"], "unknown key 'bogus'"), (["--no-python", "-m"], "cannot be used together"),
                       (["--numa-binding", "core-complex"], "not yet supported"), (["--event-log-handler", "x"], "event-log-handler")]:
        r = distrun(*args, "--", "true")
        check(r.returncode == 2 and want in r.stderr, f"{args}: rc {r.returncode}", r.stderr)
    # Elastic ranges run programs; a scenario is checked for one world size, so it is refused.
    r = distrun("--nnodes", "1:2", os.path.join(DATA, "all_reduce_4.yaml"), env={"DISTRUN_STORE_SECRET": "x"})
    check(r.returncode == 2 and "an elastic range runs programs only" in r.stderr, f"1:2 scenario: rc {r.returncode}",
          r.stderr)
    # --numa-binding: bound to the node's CPUs where the host describes its NUMA nodes.
    r = distrun("--numa-binding", "node", "--", PYTHON, "-c", "import os; print('CPUS', sorted(os.sched_getaffinity(0)))")
    nodes = sorted(glob.glob("/sys/devices/system/node/node[0-9]*/cpulist"))
    if nodes:
        with open(nodes[0]) as f:
            want = []
            for part in f.read().strip().split(","):
                lo, _, hi = part.partition("-")
                want += list(range(int(lo), int(hi or lo) + 1))
        check(r.returncode == 0 and f"CPUS {want}" in r.stdout, f"bound to node 0's CPUs {want}", r.stdout + r.stderr)
    else:
        check(r.returncode == 2 and "no NUMA information" in r.stderr, "a clear refusal", r.stderr)
    # --cpu-bind (distrun's): each local rank on its own share of the launcher's CPUs, or unbound.
    allowed = sorted(os.sched_getaffinity(0))
    show = [PYTHON, "-c", "import os; print('CPUS', sorted(os.sched_getaffinity(0)))"]
    r = distrun("--nproc-per-node", "2", "--cpu-bind", "core", "--", *show)
    sets = [json.loads(line.split("CPUS", 1)[1]) for line in r.stdout.splitlines() if "CPUS" in line]
    check(r.returncode == 0 and len(sets) == 2 and all(s and set(s) <= set(allowed) for s in sets) and
          (len(allowed) < 2 or not set(sets[0]) & set(sets[1])), f"--cpu-bind core: two shares of {allowed}",
          r.stdout + r.stderr)
    r = distrun("--nproc-per-node", "2", "--cpu-bind", "none", "--", *show)
    check(r.returncode == 0 and r.stdout.count(f"CPUS {allowed}") == 2, f"--cpu-bind none: {allowed} each",
          r.stdout + r.stderr)


def case_log_dir_runs():
    """Two runs into one log folder keep both; a symlinked folder is refused; a log that cannot be
    written is reported and fails the run."""
    with tempfile.TemporaryDirectory() as d:
        logs = os.path.join(d, "logs")
        for n in (1, 2):
            r = distrun("--nproc", "2", "--log-dir", logs, "--run-id", "same", "-r", "3", "--",
                        "sh", "-c", f'echo "run {n} rank $RANK"')
            check(r.returncode == 0, f"run {n}: rc {r.returncode}", r.stderr)
        runs = sorted(os.listdir(logs))
        check(len(runs) == 2 and all(re.fullmatch(r"same_[0-9a-f]{8}", x) for x in runs), f"two run folders: {runs}")
        contents = set()
        for run_dir in runs:
            check(os.stat(os.path.join(logs, run_dir)).st_mode & 0o077 == 0, "private run folder")
            with open(os.path.join(logs, run_dir, "attempt_0", "1", "stdout.log")) as f:
                contents.add(f.read())
        check(contents == {"run 1 rank 1\n", "run 2 rank 1\n"}, f"neither run overwrote the other: {contents}")
        target = os.path.join(d, "elsewhere")
        os.mkdir(target)
        os.symlink(target, os.path.join(d, "link"))
        r = distrun("--log-dir", os.path.join(d, "link"), "--", "true")
        check(r.returncode == 2 and "is a symlink" in r.stderr and os.listdir(target) == [], "symlink refused", r.stderr)
        # TMPDIR, unlike --log-dir, is the user's own setting: a symlinked one is followed to its
        # real folder (the kept folder of redirected logs lands there).
        r = distrun("--nproc", "1", "-r", "3", "--", "sh", "-c", "echo via-tmpdir",
                    env=dict(os.environ, TMPDIR=os.path.join(d, "link")))
        kept = glob.glob(os.path.join(target, "distrun_*", "attempt_0", "0", "stdout.log"))
        check(r.returncode == 0 and len(kept) == 1 and target in r.stderr,
              f"a symlinked TMPDIR is followed: rc {r.returncode}, logs {kept}", r.stderr)

        def small_files():
            resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))

        r = subprocess.run([DISTRUN, "--nproc", "1", "--log-dir", logs, "-r", "1", "--", "sh", "-c",
                            "head -c 20000 /dev/zero | tr '\\0' x"], capture_output=True, text=True, timeout=60,
                           preexec_fn=small_files)
        check(r.returncode == 1 and "cannot write" in r.stderr and "File too large" in r.stderr,
              f"write error: rc {r.returncode}", r.stderr)


if __name__ == "__main__":
    main({k[5:]: v for k, v in globals().items() if k.startswith("case_")})

#!/usr/bin/python3
"""Starts N ranks of a command as real processes on this host, with torchrun's variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT on a free port).
Kills every rank when the timeout passes or when one rank fails and the others linger.
Exit status: the worst rank's (timeout: 124), or with --expect-exit N: 0 when that matches.

usage: run_ranks.py --nproc N [--timeout SEC] [--expect-exit N] [--stdout FILE] -- CMD ARGS...
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--grace", type=float, default=15, help="seconds the others get after one rank fails")
    ap.add_argument("--expect-exit", type=int, default=None)
    ap.add_argument("--stdout", default=None, help="also write rank 0's stdout here")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd:
        ap.error("no command")
    port = str(free_port())
    procs = []
    for r in range(a.nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.nproc), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(a.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        out = subprocess.PIPE if (r == 0 and a.stdout) else None
        procs.append(subprocess.Popen(cmd, env=env, stdout=out, start_new_session=True, text=True))
    deadline = time.monotonic() + a.timeout
    first_failure = None
    rank0_out = ""
    if a.stdout:
        # Rank 0's output is read as it comes so a full pipe never stalls it.
        import threading
        chunks = []
        t = threading.Thread(target=lambda: chunks.append(procs[0].stdout.read()), daemon=True)
        t.start()
    timed_out = False
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            break
        now = time.monotonic()
        if first_failure is None and any(c not in (None, 0) for c in codes):
            first_failure = now
        if now > deadline or (first_failure is not None and now - first_failure > a.grace):
            timed_out = now > deadline
            print(f"run_ranks: {'timeout after %gs' % a.timeout if timed_out else 'a rank failed'}; killing the rest",
                  file=sys.stderr)
            kill_all(procs)
            break
        time.sleep(0.02)
    if a.stdout:
        t.join(timeout=5)
        rank0_out = "".join(chunks)
        sys.stdout.write(rank0_out)
        with open(a.stdout, "w") as f:
            f.write(rank0_out)
    codes = [p.returncode for p in procs]
    # Ranks this script killed after another failed do not hide the failing rank's status.
    own = [c for c in codes if c != -signal.SIGKILL] or codes
    worst = 124 if timed_out else max((c if c >= 0 else 128 - c) for c in own)
    print(f"run_ranks: exit codes {codes}", file=sys.stderr)
    if a.expect_exit is not None:
        if worst != a.expect_exit:
            print(f"run_ranks: expected exit {a.expect_exit}, got {worst}", file=sys.stderr)
            return 1
        return 0
    return worst


if __name__ == "__main__":
    sys.exit(main())

"""Helpers for the launcher's process tests: run distrun with a timeout, check that nothing
it started is left behind, skip visibly (exit 77) when something the test needs is missing."""
import os
import signal
import socket
import subprocess
import sys
import time

SKIP = 77
DISTRUN = os.environ.get("DISTRUN", "")
BIN_DIR = os.path.dirname(DISTRUN)
WORKER = os.path.join(BIN_DIR, "distrun-worker")
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
PYTHON = "/usr/bin/python3"


class Failed(Exception):
    pass


def skip(reason):
    print(f"SKIP: {reason}", flush=True)
    sys.exit(SKIP)


def check(cond, what, detail=""):
    if not cond:
        raise Failed(what + ("\n--- detail ---\n" + detail if detail else ""))


def run(args, timeout=60, env=None, **kw):
    """Runs distrun (or anything) to completion; returns CompletedProcess with text output."""
    full_env = dict(os.environ)
    for k, v in (env or {}).items():  # None unsets
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = v
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=full_env, **kw)


def distrun(*args, timeout=60, env=None):
    return run([DISTRUN, *args], timeout=timeout, env=env)


def cmdline_and_state(pid):
    """(command line, one-letter state such as R, S or Z) of process `pid`; OSError when gone."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
    return cmd, state


def processes_with(marker):
    """(pid, cmdline) of live processes whose command line or environment holds `marker`."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd, state = cmdline_and_state(int(pid))
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append((int(pid), cmd))
        elif marker in cmd and state == "Z":
            found.append((int(pid), "<zombie> " + cmd))
    return found


def expect_no_leftovers(marker, within=3.0):
    """Fails when a process whose command line holds `marker` still exists after `within` s."""
    deadline = time.time() + within
    while True:
        left = processes_with(marker)
        if not left:
            return
        if time.time() > deadline:
            for pid, _ in left:  # do not leave them to the next test
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            raise Failed(f"processes left behind: {left}")
        time.sleep(0.05)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need_worker():
    if not os.access(WORKER, os.X_OK):
        skip(f"distrun-worker not built next to distrun ({WORKER})")


def need_torch():
    r = subprocess.run([PYTHON, "-c", "import torch.distributed as d; assert d.is_available()"], capture_output=True)
    if r.returncode != 0:
        skip("python3-torch with torch.distributed is not installed at /usr/bin/python3 (scripts/deps.sh test)")


def main(cases):
    """Runs the case named by argv[1]: exit 0 pass, 1 fail, 77 skip."""
    if not DISTRUN or not os.access(DISTRUN, os.X_OK):
        print(f"FAIL: DISTRUN={DISTRUN!r} is not an executable")
        sys.exit(1)
    name = sys.argv[1]
    try:
        cases[name]()
    except Failed as e:
        print(f"FAIL {name}: {e}", flush=True)
        sys.exit(1)
    except subprocess.TimeoutExpired as e:
        print(f"FAIL {name}: timed out: {e}\nstdout: {e.stdout}\nstderr: {e.stderr}", flush=True)
        sys.exit(1)
    print(f"PASS {name}")

"""Helpers for the fault suite: start distrun with a marker in its environment (every worker
inherits it, so the process table says what is ours), watch its output with timestamps, find
a worker by rank, and check that nothing is left behind. A test that cannot run here prints
why and exits 77 (ctest SKIP)."""
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

# The basics (skip, check, Failed, where the binaries are) are the launcher tests' own.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "launcher"))
from launcher_harness import BIN_DIR, DISTRUN, SKIP, WORKER, Failed, check, cmdline_and_state, skip  # noqa: E402,F401

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
MARK_VAR = "DISTRUN_FAULT_MARK"


def new_mark():
    return "fault-" + uuid.uuid4().hex[:12]


def _parse_environ(raw):
    return dict(kv.split(b"=", 1) for kv in raw.split(b"\0") if b"=" in kv)


def marked_processes(mark):
    """{pid: (environ, cmdline, state)} of live processes (zombies included) carrying `mark`."""
    found = {}
    needle = f"{MARK_VAR}={mark}".encode()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                raw = f.read()
            if needle not in raw:
                continue
            env = _parse_environ(raw)
            cmd, state = cmdline_and_state(pid)
        except OSError:
            continue
        found[pid] = (env, cmd, state)
    return found


def worker_pids(mark, restart=None):
    """{rank: pid} of the live distrun-worker processes of a job (of one attempt if given)."""
    out = {}
    for pid, (env, cmd, state) in marked_processes(mark).items():
        if "distrun-worker" not in cmd or state == "Z" or b"RANK" not in env:
            continue
        if restart is not None and env.get(b"TORCHELASTIC_RESTART_COUNT") != str(restart).encode():
            continue
        out[int(env[b"RANK"])] = pid
    return out


def expect_no_leftovers(mark, within=5.0):
    """Fails when a process carrying `mark` still exists `within` s from now (and kills it, so
    that the next test starts clean)."""
    deadline = time.time() + within
    while True:
        left = marked_processes(mark)
        if not left:
            return
        if time.time() > deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            raise Failed("processes left behind: " + "; ".join(f"{p} [{s}] {c}" for p, (_, c, s) in left.items()))
        time.sleep(0.05)


def wait_until(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise Failed(f"timed out after {timeout} s waiting for {what}")


class Job:
    """distrun running in the background, its stdout and stderr read line by line with the
    time each line arrived."""

    def __init__(self, args, mark, env=None, cwd=None):
        full_env = dict(os.environ)
        full_env.update(env or {})
        full_env[MARK_VAR] = mark
        self.mark = mark
        self.lines = {"out": [], "err": []}  # (monotonic time, text)
        self._lock = threading.Lock()
        self.proc = subprocess.Popen([DISTRUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=full_env, cwd=cwd)
        self._readers = [threading.Thread(target=self._read, args=(self.proc.stdout, "out"), daemon=True),
                         threading.Thread(target=self._read, args=(self.proc.stderr, "err"), daemon=True)]
        for t in self._readers:
            t.start()

    def _read(self, stream, key):
        for line in stream:
            with self._lock:
                self.lines[key].append((time.monotonic(), line.rstrip("\n")))

    def text(self, key):
        with self._lock:
            return "\n".join(l for _, l in self.lines[key])

    def first_line(self, key, needle, after=0.0):
        """(time, line) of the first line holding `needle` that arrived after `after`, or None."""
        with self._lock:
            for t, l in self.lines[key]:
                if t >= after and needle in l:
                    return t, l
        return None

    def wait(self, timeout):
        """Exit status; on timeout kills everything carrying the mark and fails."""
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            for pid in marked_processes(self.mark):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.wait(timeout=10)
            raise Failed(f"distrun did not exit within {timeout} s", self.output())
        for t in self._readers:
            t.join(timeout=5)
        return rc

    def output(self):
        return "--- stdout ---\n" + self.text("out") + "\n--- stderr ---\n" + self.text("err")


def main(cases):
    """Runs the case named by argv[1]: exit 0 pass, 1 fail, 77 skip."""
    if not DISTRUN or not os.access(DISTRUN, os.X_OK):
        print(f"FAIL: DISTRUN={DISTRUN!r} is not an executable")
        sys.exit(1)
    if not os.access(WORKER, os.X_OK):
        print(f"FAIL: distrun-worker is not built next to distrun ({WORKER})")
        sys.exit(1)
    name = sys.argv[1]
    if name not in cases:
        print(f"FAIL: unknown case {name!r}; known: {', '.join(sorted(cases))}")
        sys.exit(1)
    t0 = time.monotonic()
    try:
        cases[name]()
    except Failed as e:
        print(f"FAIL {name}: {e}", flush=True)
        sys.exit(1)
    print(f"PASS {name} ({time.monotonic() - t0:.1f} s)")

"""The workers' store under faults and strangers, with real distrun and
distrun-worker processes; each case checks the process table afterwards.
Usage: DISTRUN=build/bin/distrun store_fault_tests.py CASE
Cases: stop_store_host (SIGSTOP rank 0, which hosts the store), stranger_flood (thousands of
strangers on the store port while the ranks join and run)."""
import os
import random
import resource
import signal
import socket
import struct
import threading
import time

from fault_harness import DATA, Failed, Job, check, expect_no_leftovers, new_mark, wait_until, worker_pids


def started(job):
    return job.first_line("out", "Rank 0 after") or any(l.strip().startswith("4096") for l in job.text("out").splitlines())


def case_stop_store_host():
    """SIGSTOP rank 0 of 4 mid all_reduce: it hosts the store, so nothing can be asked of the
    store; still a survivor's error names rank 0 within timeout + 2 s, then distrun stops every
    rank (the frozen one too) and exits 1."""
    mark = new_mark()
    timeout = 3
    job = Job(["--nproc", "4", "--timeout", str(timeout), os.path.join(DATA, "loop_all_reduce.yaml")], mark)
    wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
    pids = wait_until(lambda: (lambda p: p if len(p) == 4 else None)(worker_pids(mark)), 10, "4 workers")
    time.sleep(0.3)
    stopped_at = time.monotonic()
    os.kill(pids[0], signal.SIGSTOP)
    rc = job.wait(60)
    out = job.output()
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    first = job.first_line("err", "lost peer rank 0")
    check(first is not None, "no survivor named the frozen rank 0", out)
    took = first[0] - stopped_at
    print(f"first error naming rank 0 after {took:.2f} s (timeout {timeout} s): {first[1]}")
    check(took <= timeout + 2, f"error after {took:.2f} s, want <= timeout + 2 = {timeout + 2} s", out)
    check("frozen" in first[1] or "no longer answers" in first[1], "the error does not say the store stopped answering", out)
    expect_no_leftovers(mark)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Flood:
    """Strangers on 127.0.0.1:port until stopped: silent connections (up to `hold` kept open),
    wrong secrets, the old protocol's plain secret, garbage and oversized frame headers."""

    def __init__(self, port, hold=1500):
        self.port, self.hold = port, hold
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        held = []
        payloads = [b"", b"", struct.pack("<I", 21) + bytes([1]) + struct.pack("<I", 16) + b"not-the-secret!!",
                    struct.pack("<I", 37) + bytes([9]) + struct.pack("<I", 32) + os.urandom(32),  # Hello, then silence
                    b"\x05\x00\x00\x00\x7fjunk", b"\xff\xff\xff\xff" + b"x" * 64, b"\x10\x00"]
        while not self.stop.is_set():
            try:
                s = socket.socket()
                s.setblocking(True)
                s.settimeout(1)
                s.connect(("127.0.0.1", self.port))
                p = random.choice(payloads)
                if p:
                    s.sendall(p)
            except OSError:
                s.close()
                time.sleep(0.005)  # not listening yet, or the backlog is full
                continue
            self.connections += 1
            held.append(s)
            if len(held) > self.hold:
                held.pop(0).close()
        for s in held:
            s.close()

    def finish(self):
        self.stop.set()
        self.thread.join(timeout=30)


def case_stranger_flood():
    """Thousands of strangers hammer the store port from before the ranks join until the job
    ends: every rank still joins and the job exits 0 with its results, the store holds no more
    than its strangers' pool, and the log about them stays short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    mark = new_mark()
    port = free_port()
    flood = Flood(port)
    try:
        job = Job(["--nproc", "3", "--master-port", str(port), "--timeout", "60", os.path.join(DATA, "flood_job.yaml")],
                  mark)
        rc = job.wait(150)
    finally:
        flood.finish()
    out = job.output()
    err = job.text("err")
    store_lines = [l for l in err.splitlines() if "distrun store:" in l]
    print(f"{flood.connections} stranger connections during the job; {len(store_lines)} store log lines, "
          f"{sum(len(l) + 1 for l in store_lines)} bytes")
    check(rc == 0, f"distrun exit {rc}, want 0 with a flood of strangers on the port", out[-6000:])
    check(flood.connections >= 1000, f"only {flood.connections} stranger connections were made (want thousands)")
    check(len(store_lines) <= 30, f"{len(store_lines)} store log lines for the flood (want a bounded log)",
          "\n".join(store_lines[:80]))
    expect_no_leftovers(mark)


if __name__ == "__main__":
    from fault_harness import main
    main({k[5:]: v for k, v in globals().items() if k.startswith("case_")})

"""The fault suite: real distrun and distrun-worker processes, real signals, the process table
(and for the back-to-back runs, listening ports and temporary files) checked afterwards.
Usage: DISTRUN=build/bin/distrun fault_tests.py CASE
Cases: kill_<collective> (kill -9 rank 2 of 4 mid-collective), stop_rank, store_host_dies,
missing_node, missing_rank, master_port_taken, results_no_room, results_file_too_big,
max_restarts_recovers, back_to_back, oversubscribed_64, stranger_on_the_port,
stranger_cannot_make_the_store_allocate."""
import glob
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from fault_harness import (DATA, DISTRUN, WORKER, Failed, Job, check, expect_no_leftovers, marked_processes,
                           new_mark, skip, wait_until, worker_pids, MARK_VAR)

COLLECTIVES = ["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "gather",
               "scatter", "send_recv", "barrier"]
ALL_OPS = os.path.join(os.path.dirname(DATA), "..", "scenario", "data", "all_ops.yaml")  # every v1 op once
TIMEOUT = 5  # the scenarios' per-collective timeout (s)


def loop_scenario(collective, tmp):
    """The scenario that keeps `collective` busy until a rank is killed. barrier cannot be
    benchmarked, so its scenario is written here: one printed all_reduce, then many barriers."""
    if collective != "barrier":
        return os.path.join(DATA, f"loop_{collective}.yaml")
    path = os.path.join(tmp, "loop_barrier.yaml")
    with open(path, "w") as f:
        f.write(f"name: loop_barrier\nbackend: gloo\ntimeout: {TIMEOUT}\n"
                "tensors:\n  x: {shape: [1], fill: 1}\nsteps:\n  - op: all_reduce\n    input: x\n")
        f.write("  - op: barrier\n    print: false\n" * 20000)
    return path


def started(job):
    """True once rank 0 has printed the first step: every rank is past the rendezvous."""
    return job.first_line("out", "Rank 0 after") or any(l.strip().startswith("4096") for l in job.text("out").splitlines())


def ignoring_sigterm(scenario, *worker_args):
    """A program-mode command whose workers ignore SIGTERM (an ignored signal survives exec), so
    that distrun's stop at the first failure does not cut the survivors short: each must fail
    by itself and say why. distrun still SIGKILLs them after --stop-grace."""
    return ["--", "sh", "-c", 'trap "" TERM; exec "$0" "$@"', WORKER, scenario, *worker_args]


def kill_rank_mid_collective(collective):
    """kill -9 rank 2 of 4 in the middle of a collective: the summary names rank 2 and its
    signal, every survivor fails by itself naming the lost peer, nothing is left behind."""
    mark = new_mark()
    with tempfile.TemporaryDirectory() as tmp:
        scenario = loop_scenario(collective, tmp)
        results = os.path.join(tmp, "results.jsonl")
        job = Job(["--nproc", "4", "--stop-grace", "30",
                   *ignoring_sigterm(scenario, "--timeout", str(TIMEOUT), "--results", results)], mark)
        wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
        wait_until(lambda: len(worker_pids(mark)) == 4, 10, "4 workers")
        time.sleep(0.3)  # well inside the loop
        os.kill(worker_pids(mark)[2], signal.SIGKILL)
        rc = job.wait(60)
        out = job.output()
        check(rc == 1, f"distrun exit {rc}, want 1", out)
        err = job.text("err")
        for want in ["rank       : 2 (local_rank 2)", "signal 9 (SIGKILL"]:
            check(want in err, f"failure summary lacks {want!r}", out)
        for r in (0, 1, 3):
            line = job.first_line("err", f"[rank{r}]:")
            mine = [l for l in err.splitlines() if l.startswith(f"[rank{r}]:") and "error" in l]
            check(any("lost peer rank 2" in l for l in mine), f"rank {r}'s error does not name lost peer rank 2", out)
        leftovers = glob.glob(os.path.join(tmp, "results.jsonl*"))
        check(not leftovers, f"results or temporary file left by a failed job: {leftovers}")
    expect_no_leftovers(mark)


def case_stop_rank():
    """SIGSTOP rank 2 of 4 mid all_reduce: a survivor's error names it within timeout + 2 s; then
    distrun stops every rank (the frozen one too) and exits 1."""
    mark = new_mark()
    timeout = 3
    job = Job(["--nproc", "4", "--timeout", str(timeout), os.path.join(DATA, "loop_all_reduce.yaml")], mark)
    wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
    wait_until(lambda: len(worker_pids(mark)) == 4, 10, "4 workers")
    time.sleep(0.3)
    stopped_at = time.monotonic()
    os.kill(worker_pids(mark)[2], signal.SIGSTOP)
    rc = job.wait(60)
    out = job.output()
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    first = job.first_line("err", "lost peer rank 2")
    check(first is not None, "no survivor named the frozen rank 2", out)
    took = first[0] - stopped_at
    print(f"first error naming rank 2 after {took:.2f} s (timeout {timeout} s): {first[1]}")
    check(took <= timeout + 2, f"error after {took:.2f} s, want <= timeout + 2 = {timeout + 2} s", out)
    expect_no_leftovers(mark)


def case_store_host_dies():
    """kill -9 rank 0, which hosts the workers' TCPStore, mid all_reduce: every survivor fails
    by itself and names rank 0 and its store."""
    mark = new_mark()
    job = Job(["--nproc", "4", "--stop-grace", "30",
               *ignoring_sigterm(os.path.join(DATA, "loop_all_reduce.yaml"), "--timeout", str(TIMEOUT))], mark)
    wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
    wait_until(lambda: len(worker_pids(mark)) == 4, 10, "4 workers")
    time.sleep(0.3)
    os.kill(worker_pids(mark)[0], signal.SIGKILL)
    rc = job.wait(60)
    out = job.output()
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    err = job.text("err")
    check("rank       : 0 (local_rank 0)" in err and "signal 9 (SIGKILL" in err, "summary names rank 0", out)
    for r in (1, 2, 3):
        mine = [l for l in err.splitlines() if l.startswith(f"[rank{r}]:") and "error" in l]
        check(any("rank 0" in l for l in mine), f"rank {r}'s error does not name rank 0", out)
        check(any("store" in l for l in mine), f"rank {r}'s error does not say the store is gone", out)
    expect_no_leftovers(mark)


def case_missing_node():
    """Node 0 of 2 waits for node 1, which never comes: the rendezvous timeout names it."""
    mark = new_mark()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    job = Job(["--nnodes", "2", "--node-rank", "0", "--nproc", "2", "--master-addr", "127.0.0.1", "--master-port",
               str(port), "--rdzv-timeout", "2", os.path.join(DATA, "loop_all_reduce.yaml")], mark,
              env={"DISTRUN_STORE_SECRET": os.urandom(16).hex()})
    rc = job.wait(30)
    out = job.output()
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    check("node(s) 1 of 2 never joined" in job.text("err"), "the missing node is not named", out)
    check(not worker_pids(mark), "no worker may start")
    expect_no_leftovers(mark)


def case_missing_rank():
    """A world of 4 where rank 3 never starts (distrun-worker run directly, as under srun): the
    others' rendezvous fails within its timeout and names the missing rank."""
    mark = new_mark()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(3):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE="4", LOCAL_RANK=str(r), LOCAL_WORLD_SIZE="4",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), DISTRUN_STORE_SECRET="ab" * 16)
        env[MARK_VAR] = mark
        procs.append(subprocess.Popen([WORKER, os.path.join(DATA, "loop_all_reduce.yaml"), "--timeout", "3"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    try:
        outs = [p.communicate(timeout=60) for p in procs]
    except subprocess.TimeoutExpired:
        raise Failed("a rank hung waiting for the missing rank 3")
    finally:
        for p in procs:
            p.kill()
    for r, (p, (o, e)) in enumerate(zip(procs, outs)):
        check(p.returncode == 1, f"rank {r} exit {p.returncode}, want 1", e)
        check("3" in e and ("never joined" in e or "missing" in e or "rank 3" in e or "ranks 3" in e),
              f"rank {r}'s error does not name the missing rank 3", e)
    expect_no_leftovers(mark)


def case_master_port_taken():
    """An explicit --master-port that is taken: exit 2 before any worker starts, naming it."""
    mark = new_mark()
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        job = Job(["--nproc", "2", "--master-port", str(port), os.path.join(DATA, "loop_all_reduce.yaml")], mark)
        rc = job.wait(30)
        out = job.output()
        check(rc == 2, f"distrun exit {rc}, want 2", out)
        check(str(port) in job.text("err") and "already in use" in job.text("err"), "the port is not named", out)
    expect_no_leftovers(mark)


def results_failure(directory, extra_env=None, wrapper=None):
    """Runs a scenario whose results do not fit in `directory`: a clear error naming the file,
    exit 1, and neither the file nor its temporary left there."""
    mark = new_mark()
    results = os.path.join(directory, "results.jsonl")
    scenario = os.path.join(DATA, "big_results.yaml")
    args = ["--nproc", "2", "--results", results, scenario] if wrapper is None else \
        ["--nproc", "2", "--", "sh", "-c", wrapper + '; exec "$0" "$@"', WORKER, scenario, "--results", results]
    job = Job(args, mark, env=extra_env)
    rc = job.wait(60)
    out = job.output()
    check(rc == 1, f"distrun exit {rc}, want 1", out)
    err = job.text("err")
    check(f"cannot write the results file '{results}'" in err, "no clear error naming the results file", out)
    left = os.listdir(directory)
    check(not left, f"left in the results folder: {left}", out)
    expect_no_leftovers(mark)
    return err


def case_results_no_room():
    """--results on a 16 KiB tmpfs that the results do not fit in (root only)."""
    if os.geteuid() != 0:
        skip("mounting a tmpfs needs root")
    mnt = tempfile.mkdtemp(prefix="distrun-fault-tmpfs-")
    try:
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", mnt], capture_output=True, text=True)
        if r.returncode != 0:
            skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        try:
            err = results_failure(mnt)
            check("No space left on device" in err, "the error does not say the disk is full", err)
        finally:
            subprocess.run(["umount", mnt], capture_output=True)
    finally:
        os.rmdir(mnt)


def case_results_file_too_big():
    """The same without root: a file-size limit (ulimit -f) on rank 0, SIGXFSZ ignored, so the
    write fails with EFBIG as it would on a full disk."""
    with tempfile.TemporaryDirectory() as d:
        err = results_failure(d, wrapper='trap "" XFSZ; ulimit -f 16')
        check("File too large" in err, "the error does not say the file is too large", err)


def case_max_restarts_recovers():
    """A rank killed in the first attempt: --max-restarts 1 restarts the group, the second
    attempt finishes, exit 0, and the results are complete and correct."""
    mark = new_mark()
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.jsonl")
        job = Job(["--nproc", "3", "--max-restarts", "1", "--timeout", "10", "--results", results,
                   os.path.join(DATA, "restartable.yaml")], mark)
        wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
        pids = wait_until(lambda: worker_pids(mark, restart=0), 10, "attempt 0's workers")
        check(1 in pids, "rank 1 of attempt 0 is running (the scenario ended too fast?)", job.output())
        os.kill(pids[1], signal.SIGKILL)
        rc = job.wait(120)
        out = job.output()
        check(rc == 0, f"distrun exit {rc}, want 0 after one restart", out)
        check("restarting all workers (restart 1 of 1)" in job.text("err"), "no restart was reported", out)
        with open(results) as f:
            records = [json.loads(l) for l in f]
        steps = sorted({r["step"] for r in records})
        check(steps == [0, 1, 2], f"results of steps {steps}, want 0, 1, 2", out)
        tensors = [r for r in records if r["op"] != "bench"]
        check(all(r["wrong"] == 0 for r in tensors), "wrong values after the restart", out)
        # The bench step says check: false, so its records carry no count of wrong elements.
        check(all(r["wrong"] is None for r in records if r["op"] == "bench"), "an unchecked bench counted #wrong", out)
        final = [r for r in records if r["step"] == 2]
        check(len(final) == 3 and all(r["values"] == [3, 3, 3, 3] for r in final), f"final all_reduce {final}")
        check(os.listdir(tmp) == ["results.jsonl"], f"left in the results folder: {os.listdir(tmp)}")
    expect_no_leftovers(mark)


def listening_ports():
    """{port: socket inode} of listening TCP sockets (IPv4 and IPv6)."""
    ports = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if parts[3] == "0A":
                        ports[int(parts[1].rsplit(":", 1)[1], 16)] = parts[9]
        except OSError:
            pass
    return ports


def listening_addresses():
    """[(address, port)] of listening IPv4 TCP sockets."""
    out = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            parts = line.split()
            if parts[3] == "0A":
                hexaddr, hexport = parts[1].split(":")
                out.append((socket.inet_ntoa(struct.pack("<I", int(hexaddr, 16))), int(hexport, 16)))
    return out


def socket_owners(inodes):
    """{inode: [pid, ...]} for the given socket inodes."""
    owners = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{name}/fd"):
                target = os.readlink(f"/proc/{name}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    owners.setdefault(target[8:-1], []).append(int(name))
        except OSError:
            continue
    return owners


def temp_entries():
    """Names in /tmp and /dev/shm that distrun or its store could have made."""
    names = set()
    for d in ("/tmp", "/dev/shm"):
        try:
            names |= {os.path.join(d, n) for n in os.listdir(d) if "distrun" in n.lower() or "gloo" in n.lower()}
        except OSError:
            pass
    return names


def case_back_to_back():
    """Runs back to back (4 ranks, --results; 50, or BACK_TO_BACK_RUNS): each exits 0 with
    complete results, and after them no process, listening port or temporary file of theirs is
    left."""
    runs = int(os.environ.get("BACK_TO_BACK_RUNS", "50"))
    mark = new_mark()
    ports_before = listening_ports()
    temps_before = temp_entries()
    with tempfile.TemporaryDirectory() as tmp:
        private_tmp = os.path.join(tmp, "tmpdir")
        os.mkdir(private_tmp)
        results = os.path.join(tmp, "out", "results.jsonl")
        os.mkdir(os.path.dirname(results))
        for i in range(runs):
            job = Job(["--nproc", "4", "--results", results, os.path.join(DATA, "small.yaml")], mark,
                      env={"TMPDIR": private_tmp})
            rc = job.wait(60)
            check(rc == 0, f"run {i}: exit {rc}", job.output())
            with open(results) as f:
                n = sum(1 for _ in f)
            check(n == 8, f"run {i}: {n} result records, want 8", job.output())
            check(os.listdir(os.path.dirname(results)) == ["results.jsonl"],
                  f"run {i}: left beside the results: {os.listdir(os.path.dirname(results))}")
        expect_no_leftovers(mark)
        check(not os.listdir(private_tmp), f"left in TMPDIR: {os.listdir(private_tmp)}")
    # A run's log folder (distrun_RUNID_XXXXXXXX) goes to its TMPDIR, here private_tmp: one in
    # /tmp belongs to another test running beside this one.
    new_temps = {n for n in temp_entries() - temps_before
                 if not (n.startswith("/tmp/distrun_") and re.fullmatch(r"distrun_.*_[0-9a-f]{8}", os.path.basename(n)))}
    check(not new_temps, f"temporary files left: {sorted(new_temps)}")
    # Other tests may run beside this one: a new listening port counts only when its owner is ours.
    new_ports = {p: ino for p, ino in listening_ports().items() if p not in ports_before}
    owners = socket_owners(set(new_ports.values()))
    ours = set(marked_processes(mark))
    bad = {p: owners.get(ino, []) for p, ino in new_ports.items() if not owners.get(ino) or set(owners[ino]) & ours}
    # An orphaned listening socket (no owner) is possible only for a moment while a process exits.
    if bad:
        time.sleep(1)
        still = listening_ports()
        bad = {p: o for p, o in bad.items() if p in still}
    check(not bad, f"listening ports left by the runs: {bad}")
    print(f"{runs} runs: no process, port or temporary file left "
          f"({len(new_ports)} new listening port(s) belong to other processes)")


def case_oversubscribed_64():
    """64 ranks on a machine with far fewer cores finish a scenario using every v1 op, checked,
    within a generous per-collective timeout."""
    mark = new_mark()
    with tempfile.TemporaryDirectory() as tmp:
        results = os.path.join(tmp, "results.jsonl")
        t0 = time.monotonic()
        job = Job(["--nproc", "64", "--timeout", "240", "--results", results, ALL_OPS], mark)
        rc = job.wait(400)
        took = time.monotonic() - t0
        check(rc == 0, f"distrun exit {rc}, want 0", job.output()[-5000:])
        with open(results) as f:
            records = [json.loads(l) for l in f]
        check(all(r["wrong"] == 0 for r in records), "wrong values")
        check({r["rank"] for r in records} == set(range(64)), "a result from every rank")
        print(f"64 ranks on {os.cpu_count()} cores: every v1 op, {len(records)} checked records, {took:.1f} s")
    expect_no_leftovers(mark)


def store_port_of(mark):
    """(rank 0's pid, the workers' store port) of a running job."""
    # Wait for rank 0 itself: the workers start in any order.
    pids = wait_until(lambda: (lambda p: p if 0 in p else None)(worker_pids(mark)), 30, "rank 0 to start")
    with open(f"/proc/{pids[0]}/environ", "rb") as f:
        env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    return pids[0], int(env[b"MASTER_PORT"])


def closed_by_server(sock, within=5.0):
    """True when the server closes `sock` (EOF or reset) within `within` s."""
    sock.settimeout(within)
    try:
        while sock.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def frame(payload):
    return struct.pack("<I", len(payload)) + payload


def case_stranger_on_the_port():
    """While a job runs, strangers connect to its store port: a wrong secret, garbage, a frame
    length over the bound, and one that says nothing. The port listens on loopback only (one
    host), each offender is disconnected with a log line naming why, and the job finishes."""
    mark = new_mark()
    job = Job(["--nproc", "3", "--timeout", "20", os.path.join(DATA, "restartable.yaml")], mark)
    wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
    _, port = store_port_of(mark)
    bound = [a for a, p in listening_addresses() if p == port]
    check(bound == ["127.0.0.1"], f"store port {port} listens on {bound}, want loopback only")
    wrong_secret = frame(bytes([1]) + struct.pack("<I", 16) + b"not-the-secret!!")  # Cmd::Auth
    offenders = {"wrong secret": wrong_secret, "garbage": b"\x05\x00\x00\x00\x7fjunk",
                 "oversized frame": b"\xff\xff\xff\xff" + b"x" * 64}
    socks = {}
    silent = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        for what, payload in offenders.items():
            socks[what] = socket.create_connection(("127.0.0.1", port), timeout=5)
            socks[what].sendall(payload)
        for what, s in socks.items():
            check(closed_by_server(s), f"the store kept the {what} connection open")
        rc = job.wait(120)
    finally:
        silent.close()
        for s in socks.values():
            s.close()
    out = job.output()
    check(rc == 0, f"distrun exit {rc}, want 0 with strangers on the port", out)
    err = job.text("err")
    for line in ["missing or wrong job secret", "refused a frame of 4294967295 bytes"]:
        check(line in err, f"no log line saying {line!r}", out)
    expect_no_leftovers(mark)


def vm_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))


def case_stranger_cannot_make_the_store_allocate():
    """Eight strangers that never authenticate each announce a frame just under the bound
    (256 MiB): the store must not reserve that memory for them (before the secret, only an
    authentication frame, a few bytes, is worth reading)."""
    mark = new_mark()
    job = Job(["--nproc", "2", "--timeout", "30", os.path.join(DATA, "loop_all_reduce.yaml")], mark)
    try:
        wait_until(lambda: started(job), 60, "the job to start\n" + job.output())
        rank0, port = store_port_of(mark)
        before = vm_rss_kib(rank0)
        socks = []
        for _ in range(8):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            s.sendall(struct.pack("<I", (256 << 20) - 1) + b"x" * 16)
            socks.append(s)
        time.sleep(1.0)
        grown_mib = (vm_rss_kib(rank0) - before) / 1024
        for s in socks:
            s.close()
        print(f"rank 0 grew by {grown_mib:.0f} MiB for 8 unauthenticated 256 MiB frame headers")
        check(grown_mib < 64, f"rank 0 (the store host) grew by {grown_mib:.0f} MiB for strangers that never "
                              "authenticated (lib/distrun/store/tcp_store_server.cpp sizes the body before auth)")
    finally:
        for pid in marked_processes(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        job.wait(30)
    expect_no_leftovers(mark)


def _register_kill_cases():
    for c in COLLECTIVES:
        globals()[f"case_kill_{c}"] = (lambda c=c: kill_rank_mid_collective(c))


_register_kill_cases()

if __name__ == "__main__":
    from fault_harness import main
    main({k[5:]: v for k, v in globals().items() if k.startswith("case_")})

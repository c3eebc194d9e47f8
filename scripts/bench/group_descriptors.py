#!/usr/bin/env python3
"""Descriptors a rank holds with many groups on the socket path.

Starts two `distrun-worker` ranks directly on this host (DISTRUN_CMA=0: the TCP path, over
distrun's sockets) on a scenario with N groups of both ranks, one all_reduce in each, then
world all_reduces long enough to be sampled, and reports the most sockets each rank held
(from /proc/PID/fd) and how many of them were listening (from /proc/net/tcp, state 0A).

    scripts/bench/group_descriptors.py [--groups 64] [--worker build/bin/distrun-worker]
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time


def scenario(groups):
    lines = ["name: group_descriptors", "world_size: 2", "groups:"]
    lines += [f"  g{i}: [0, 1]" for i in range(groups)]
    lines += ["tensors:", "  x: {shape: [4], fill: rank}", "  big: {shape: [4194304], fill: 1}", "steps:"]
    for i in range(groups):
        lines += [f"  - {{op: all_reduce, group: g{i}, input: x, reduce: sum, print: false}}"]
    lines += ["  - {op: all_reduce, input: big, reduce: max, print: false}"] * 20
    return "\n".join(lines) + "\n"


def inodes(pid):
    """The socket inodes of `pid`'s descriptors."""
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                out.add(link[8:-1])
    except OSError:
        pass
    return out


def listening_inodes():
    out = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A":
                        out.add(cols[9])
        except OSError:
            pass
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=64)
    ap.add_argument("--worker", default="build/bin/distrun-worker")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "groups.yaml")
        with open(path, "w") as f:
            f.write(scenario(a.groups))
        port = str(free_port())
        procs = []
        for r in (0, 1):
            env = dict(os.environ, DISTRUN_CMA="0", RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r),
                       LOCAL_WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            procs.append(subprocess.Popen([a.worker, "--timeout", "60", path], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        most = [(0, 0), (0, 0)]
        deadline = time.time() + 120
        while any(p.poll() is None for p in procs) and time.time() < deadline:
            listening = listening_inodes()
            for i, p in enumerate(procs):
                s = inodes(p.pid)
                if len(s) > most[i][0]:
                    most[i] = (len(s), len(s & listening))
            time.sleep(0.002)
        for p in procs:
            if p.poll() is None:
                p.kill()
            err = p.communicate()[1]
            if p.returncode != 0:
                sys.exit(f"a rank failed (rc {p.returncode}):\n{err}")
    for r, (sockets, listening) in enumerate(most):
        print(f"groups {a.groups} rank {r}: at most {sockets} sockets, {listening} of them listening")


if __name__ == "__main__":
    main()

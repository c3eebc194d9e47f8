#!/usr/bin/env python3
"""Runs Catch2 cases of a unit binary as one process per host, the hosts being network
namespaces on a bridge (tests/launcher/multihost_test.py's Hosts). Each process is told its
host (DISTRUN_HOST_ID: the namespaces share one kernel, which would otherwise let the ranks
read each other's memory), so the group takes its TCP path as between real hosts, and
DISTRUN_TEST_WORLD=tcp, so that run_ranks (ranks.hpp) runs this process's rank only and
requires that path. Needs root and `ip netns`: skipped (exit 77) otherwise.
Usage: netns_hosts.py HOSTS BINARY CATCH_ARGS..."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launcher"))
from multihost_test import ADDR, Hosts  # noqa: E402

LIMIT = 120  # seconds for the whole run: a hung rank is a failure, never a hang


def main():
    n, binary, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
    secret = os.urandom(16).hex()
    with Hosts(n) as h:
        running = []
        for k in range(n):
            env = dict(os.environ, RANK=str(k), WORLD_SIZE=str(n), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                       MASTER_ADDR=ADDR[0], MASTER_PORT="29530", DISTRUN_HOST_ID=f"host{k}",
                       DISTRUN_STORE_SECRET=secret, DISTRUN_TEST_WORLD="tcp")
            running.append(subprocess.Popen(["ip", "netns", "exec", h.ns[k], binary, "--warn", "NoTests", *args],
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
        failed = False
        for k, p in enumerate(running):
            try:
                out, _ = p.communicate(timeout=LIMIT)
            except subprocess.TimeoutExpired:
                for q in running:
                    q.kill()
                out, _ = p.communicate()
                print(f"host {k}: still running after {LIMIT} s")
                failed = True
            print(f"--- host {k} (exit {p.returncode}) ---\n{out.strip()}")
            failed |= p.returncode != 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

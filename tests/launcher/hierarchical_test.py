"""The hierarchical all_reduce between real "hosts": two network namespaces on a bridge (the
multihost test's `Hosts`), two ranks on each. Each agent tells its ranks which host they are
on (DISTRUN_HOST_ID, and DISTRUN_TRANSPORT=auto over the helper's DISTRUN_CMA=0: the namespaces share one kernel, which would otherwise let every rank read
every other's memory), so the ranks of a host meet through shared memory and the slices cross
the veth pairs over TCP. distrun-bench checks every element of every size (#wrong), with counts
that do and do not split into the ranks of a host, and prints the path it took; the same job
with DISTRUN_HIERARCHY=flat takes the flat TCP path. Needs root and `ip netns`."""
import os
import re
import sys
import time

from launcher_harness import BIN_DIR, check, main, skip
from multihost_test import Hosts, finish

BENCH = os.path.join(BIN_DIR, "distrun-bench")
# 4 B .. 768 KiB: 1 float (fewer than the 2 ranks of a host: flat), 3 (a slice each and a tail
# of one), up to past the shared segment's 64 KiB inline slots (single-copy reads on a host).
SWEEP = ["all_reduce", "-b", "4", "-e", "786432", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-d", "float", "-v"]
SWEEP3 = ["all_reduce", "-b", "12", "-e", "12", "-n", "2", "-w", "1", "-c", "1", "-d", "all", "-o", "all"]


def run_both(h, args, extra_env=None):
    procs = [h.agent(k, 2, ["--", BENCH, *args], env={"DISTRUN_TRANSPORT": "auto", "DISTRUN_HOST_ID": f"host{k}",
                                                      **(extra_env or {})}) for k in (0, 1)]
    res = finish(procs)
    check([r[0] for r in res] == [0, 0], f"both agents exit 0: {[r[0] for r in res]}", str(res))
    return res[0][1] + res[0][2]


def wrong_counts(out):
    return [int(x) for x in re.findall(r"^\s+\d+\s+\d+\s+\S+\s+\S+\s+-?\d+\s+\S+\s+\S+\s+\S+\s+(\d+)", out, re.M)]


def case_all_reduce():
    t0 = time.time()
    if not os.access(BENCH, os.X_OK):
        skip(f"distrun-bench not built next to distrun ({BENCH})")
    with Hosts(2) as h:
        out = run_both(h, SWEEP)
        check("# backend gloo, transport hierarchical(shm x2, tcp x2), 4 ranks" in out, "the hierarchical path", out)
        check("gloo group of 4 ranks [0,1,2,3]: hierarchical(shm x2, tcp x2) path" in out, "-v names the path", out)
        check("# Wrong elements       : 0 OK" in out and len(wrong_counts(out)) == 6, "every element right", out)
        # Every dtype and op on a count with a tail (3 floats: a slice per rank and one left).
        out = run_both(h, SWEEP3)
        check("transport hierarchical(shm x2, tcp x2)" in out and "# Wrong elements       : 0 OK" in out,
              "every dtype and op right", out)
        out = run_both(h, ["all_reduce", "-b", "4096", "-e", "4096", "-n", "1", "-w", "0", "-c", "1"], {"DISTRUN_HIERARCHY": "flat"})
        check("# backend gloo, transport tcp, 4 ranks" in out and "# Wrong elements       : 0 OK" in out,
              "DISTRUN_HIERARCHY=flat: the flat TCP path", out)
    print(f"MEASURE hierarchical netns test: {time.time() - t0:.1f} s", flush=True)


def case_regrouped():
    """all_gather, reduce_scatter and broadcast (rooted on each host) on the hierarchical path:
    blocks regrouped by host and place, every element checked, counts with and without a tail."""
    if not os.access(BENCH, os.X_OK):
        skip(f"distrun-bench not built next to distrun ({BENCH})")
    with Hosts(2) as h:
        for args in (["all_gather"], ["reduce_scatter"], ["broadcast", "-r", "0"], ["broadcast", "-r", "3"]):
            out = run_both(h, [*args, "-b", "4", "-e", "786432", "-f", "8", "-n", "2", "-w", "1", "-c", "1", "-d", "float"])
            check(f"# backend gloo, transport hierarchical(shm x2, tcp x2), 4 ranks" in out, f"{args}: the hierarchical path",
                  out)
            check("# Wrong elements       : 0 OK" in out and len(wrong_counts(out)) == 6, f"{args}: every element right", out)


if __name__ == "__main__":
    main({name[5:]: fn for name, fn in globals().items() if name.startswith("case_")})

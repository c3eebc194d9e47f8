"""`distrun-bench qualify` at its default thresholds on four hosts made of network namespaces on
a bridge (the bridge in a fifth namespace, names unique per run), one distrun-bench rank per
host started with torchrun's variables. Healthy: exit 0, no suspect (DISTRUN_QUALIFY_HEALTHY_RUNS
times, default 2; the false-positive count of docs/bench.md comes from 20). One host's sending
throttled with `tc tbf rate 100mbit`: that host is named (by its address; the hosts share a
hostname), as slow sending, no other, exit 1, with every pair measured and again with one round
of disjoint pairs plus bisection. Two hosts of four throttled: both named, no other. One
direction of one pair throttled (an htb class and a u32 filter on one veth): named as a link,
with its direction. Needs root, ip, tc."""
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

from bench_harness import BENCH, SCHEMA, Failed, check, main, skip, validate

TAG = f"dq{os.getpid() % 100000}{random.randint(0, 9)}"
HOSTS = int(os.environ.get("DISTRUN_QUALIFY_HOSTS", "4"))  # scripts/bench/qualify_times.py sets more
NS = [f"{TAG}h{i}" for i in range(HOSTS)]
SW = f"{TAG}sw"
BR = f"{TAG}br"
HOST_IF = [f"{TAG}e{i}" for i in range(HOSTS)]   # inside host i
PORT_IF = [f"{TAG}p{i}" for i in range(HOSTS)]   # its other end, on the bridge
ADDR = [f"192.0.2.{10 + i}" for i in range(HOSTS)]
# Small, so a throttled run stays within seconds; the thresholds are the defaults.
QUALIFY = ["-b", "1M", "-T", "60"]
# The faults below are bandwidth limits (tc), so their cases judge bandwidth only: on a 2-core
# host the scheduler holds one exchange in a few for 3-4 ms, which the latency judge rightly
# reads as a slow direction (it is tested on synthetic figures in bench.engine.*). The healthy
# runs keep every default.
BANDWIDTH_ONLY = ["--max-latency-factor", "1000"]
HEALTHY_RUNS = int(os.environ.get("DISTRUN_QUALIFY_HEALTHY_RUNS", "2"))


def sh(*args):
    r = subprocess.run(args, capture_output=True, text=True, timeout=20)
    if r.returncode != 0:
        raise subprocess.CalledProcessError(r.returncode, args, r.stdout, r.stderr)


def setup():
    sh("ip", "netns", "add", SW)
    sh("ip", "-n", SW, "link", "add", BR, "type", "bridge")
    sh("ip", "-n", SW, "link", "set", BR, "up")
    for i in range(HOSTS):
        sh("ip", "netns", "add", NS[i])
        sh("ip", "link", "add", HOST_IF[i], "netns", NS[i], "type", "veth", "peer", "name", PORT_IF[i], "netns", SW)
        sh("ip", "-n", SW, "link", "set", PORT_IF[i], "master", BR, "up")
        sh("ip", "-n", NS[i], "addr", "add", ADDR[i] + "/24", "dev", HOST_IF[i])
        sh("ip", "-n", NS[i], "link", "set", HOST_IF[i], "up")
        sh("ip", "-n", NS[i], "link", "set", "lo", "up")


def teardown():
    for ns in NS + [SW]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=20)


def throttle_host(i):
    sh("ip", "netns", "exec", NS[i], "tc", "qdisc", "add", "dev", HOST_IF[i], "root", "tbf", "rate", "100mbit",
       "burst", "64kb", "latency", "100ms")


def throttle_pair(i, j):
    """Only the data host i sends to host j goes through a 100 Mbit/s class (an htb whose
    unclassified traffic passes unshaped, a u32 filter on the destination). Packets under 256
    bytes, the acknowledgements of what j sends to i among them, go through a class of their
    own at 10 Gbit/s: shaped at 100 Mbit/s, the acknowledgements alone would cap j -> i near
    0.5 GB/s, below half of a healthy direction over distrun's sockets here, and the fault
    would not be one-way."""
    ns = ["ip", "netns", "exec", NS[i], "tc"]
    sh(*ns, "qdisc", "add", "dev", HOST_IF[i], "root", "handle", "1:", "htb")
    sh(*ns, "class", "add", "dev", HOST_IF[i], "parent", "1:", "classid", "1:10", "htb", "rate", "10gbit")
    sh(*ns, "class", "add", "dev", HOST_IF[i], "parent", "1:", "classid", "1:20", "htb", "rate", "100mbit")
    sh(*ns, "filter", "add", "dev", HOST_IF[i], "parent", "1:", "protocol", "ip", "prio", "1", "u32", "match", "ip",
       "dst", ADDR[j] + "/32", "match", "u16", "0x0000", "0xff00", "at", "2", "flowid", "1:10")
    sh(*ns, "filter", "add", "dev", HOST_IF[i], "parent", "1:", "protocol", "ip", "prio", "2", "u32", "match", "ip",
       "dst", ADDR[j] + "/32", "flowid", "1:20")


def unthrottle(i):
    subprocess.run(["ip", "netns", "exec", NS[i], "tc", "qdisc", "del", "dev", HOST_IF[i], "root"], capture_output=True,
                   timeout=20)


SECRET = os.urandom(16).hex()


def qualify(out_dir, name, extra=()):
    """Runs one rank per host; returns (exit codes, rank 0's stdout, the -J document)."""
    json_path = os.path.join(out_dir, f"{name}.json")
    procs = []
    for i in range(HOSTS):
        env = dict(os.environ, RANK=str(i), WORLD_SIZE=str(HOSTS), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   GROUP_RANK=str(i), NODE_RANK=str(i), MASTER_ADDR=ADDR[0], MASTER_PORT="29517",
                   # The namespaces share one kernel: keep the single-copy path off so the
                   # bytes cross the veths.
                   DISTRUN_CMA="0",
                   # Ranks on several hosts need the job secret (their store is reachable).
                   DISTRUN_STORE_SECRET=SECRET)
        cmd = ["ip", "netns", "exec", NS[i], BENCH, "qualify", *QUALIFY, *extra]
        if i == 0:
            cmd += ["-J", json_path]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=120))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
    codes = [p.returncode for p in procs]
    doc = json.load(open(json_path)) if os.path.exists(json_path) else None
    return codes, outs[0][0], doc, "".join(o[1] for o in outs)


def suspects(doc):
    return sorted(s["address"] for s in doc["qualify"]["suspect_nodes"])


def links(doc):
    """Each slow direction of each suspect link as (from address, to address)."""
    nodes = doc["qualify"]["nodes"]
    out = []
    for l in doc["qualify"]["suspect_links"]:
        a, b = nodes[l["a"]]["address"], nodes[l["b"]]["address"]
        out += [(a, b)] * bool(l["a_to_b"]) + [(b, a)] * bool(l["b_to_a"])
    return sorted(out)


def test():
    if os.geteuid() != 0:
        skip("needs root to create network namespaces")
    for prog in ("ip", "tc"):
        if not shutil.which(prog):
            skip(f"`{prog}` not found (iproute2; scripts/deps.sh test)")
    d = tempfile.mkdtemp(prefix="distrun-qualify-")
    try:
        try:
            setup()
        except subprocess.CalledProcessError as e:
            skip(f"cannot create namespaces, veths or a bridge here: {e.stderr.strip()}")
        # Healthy: nobody is named; the baseline of the first run is saved for the last case.
        false_positives = 0
        for run_index in range(HEALTHY_RUNS):
            extra = ["--save-baseline", os.path.join(d, "base.json")] if run_index == 0 else []
            codes, out, doc, err = qualify(d, "healthy", extra)
            check(doc is not None, f"healthy: rc {codes}", out + err)
            validate(doc, "healthy qualify -J")
            named = suspects(doc) + links(doc) + (["ring"] if doc["qualify"]["ring"]["slow"] else [])
            false_positives += bool(named) or codes != [0] * HOSTS
            print(f"healthy run {run_index + 1}: exit {codes}, named {named}", flush=True)
            if named:
                print(out, flush=True)
        print(f"healthy: {false_positives} false positives in {HEALTHY_RUNS} runs", flush=True)
        check(false_positives == 0, f"healthy: {false_positives} of {HEALTHY_RUNS} runs named something")
        check(sum(d["phase"] == "rounds" for d in doc["qualify"]["directions"]) == 12,
              "healthy: both directions of every pair of 4 measured", out)
        check("# verdict: OK" in out, "healthy: verdict OK", out)

        # Host 2 sends at 100 Mbit/s: host 2 is the suspect, by its address, and no other.
        throttle_host(2)
        try:
            codes, out, doc, err = qualify(d, "host", BANDWIDTH_ONLY)
            check(codes == [1] * HOSTS, f"throttled host: every rank exits 1, got {codes}", out + err)
            validate(doc, "throttled qualify -J")
            check(suspects(doc) == [ADDR[2]], f"throttled host named alone: {suspects(doc)}", out)
            check(links(doc) == [], f"no suspect link besides: {links(doc)}", out)
            node = doc["qualify"]["nodes"][2]
            check(node["slow_out"] == 3 and node["out_bw_gbps"] < node["in_bw_gbps"], "named as slow sending", out)
            check(f"({ADDR[2]})" in out.split("# suspect nodes:")[1].splitlines()[0], "the suspect line names it", out)
            check("# exclude: " in out and "# verdict: FAILED" in out, "exclude line and verdict", out)
            # One round of disjoint pairs, then bisection against healthy nodes.
            codes, out, doc, err = qualify(d, "rounds", ["--rounds", "1", *BANDWIDTH_ONLY])
            check(codes == [1] * HOSTS, f"rounds: every rank exits 1, got {codes}", out + err)
            check(suspects(doc) == [ADDR[2]], f"rounds + bisection name the host: {suspects(doc)}", out)
            check(any(p["phase"] == "bisect" for p in doc["qualify"]["directions"]), "bisection pairs measured", out)
            # Hosts 1 and 2 both throttled: half the cluster, both named and no other.
            throttle_host(1)
            try:
                codes, out, doc, err = qualify(d, "two", BANDWIDTH_ONLY)
                check(codes == [1] * HOSTS, f"two throttled hosts: every rank exits 1, got {codes}", out + err)
                check(suspects(doc) == [ADDR[1], ADDR[2]], f"both named: {suspects(doc)}", out)
                check(links(doc) == [], f"no suspect link besides: {links(doc)}", out)
            finally:
                unthrottle(1)
        finally:
            unthrottle(2)

        # Only host 1 -> host 3 slowed: a suspect link between two healthy hosts, that
        # direction only, judged against the healthy run's baseline.
        throttle_pair(1, 3)
        try:
            codes, out, doc, err = qualify(d, "link", ["--baseline", os.path.join(d, "base.json"), *BANDWIDTH_ONLY])
            check(codes == [1] * HOSTS, f"throttled pair: every rank exits 1, got {codes}", out + err)
            check(links(doc) == [(ADDR[1], ADDR[3])], f"the direction 1 -> 3 named as a link: {links(doc)}", out)
            check(suspects(doc) == [], f"no suspect node: {suspects(doc)}", out)
            check(doc["qualify"]["config"]["baseline"] is True, "judged against the baseline", out)
            check(f"({ADDR[1]}) -> vm ({ADDR[3]})" in out or f"({ADDR[1]}) -> " in out, "the direction printed", out)
        finally:
            unthrottle(1)
    finally:
        teardown()
        shutil.rmtree(d, ignore_errors=True)


# qualify's verdicts rest on bandwidths measured between namespaces on a shared 2-core host,
# where a noisy minute can still fool the judge (a healthy run named two hosts once in 7 of CI's
# suites). The test gets a second attempt, printing why the first failed; a broken judge fails
# both.
ATTEMPTS = 2


def test_with_attempts():
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return test()
        except Failed as e:
            if attempt == ATTEMPTS:
                raise
            print(f"attempt {attempt} of {ATTEMPTS} failed, trying again:\n{e}", flush=True)


if __name__ == "__main__":
    sys.argv[1:] = ["qualify_netns"]
    main({"qualify_netns": test_with_attempts})

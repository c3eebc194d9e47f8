"""--rdzv-backend etcd against a real etcd (Debian's etcd-server): the client on its own, then
elastic jobs whose rounds are kept in etcd, on network-namespace hosts joined by a bridge
(agents on hosts of their own, etcd members on others). A job goes on without node 0 after
node 0's host (agent and workers) is killed, and after the etcd leader is killed. Skips (77)
without etcd, root or `ip netns`."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request

from launcher_harness import DISTRUN, PYTHON, Failed, check, free_port, main, skip
from multihost_test import (ELASTIC_PY, SECRET, elastic_lines, finish, first_failure, gives_up_on_frozen,
                            hold_past_give_up, ip, stopped_at)

TAG = f"det{os.getpid() % 100000}"
ETCD = shutil.which("etcd")
CLIENT_TEST = os.environ.get("ETCD_CLIENT_TEST", "")


def need_etcd():
    if not ETCD:
        skip("etcd is not installed (Debian's etcd-server; scripts/deps.sh test)")


def etcd_cmd(name, ip_addr, client, peer, cluster, data):
    return [ETCD, "--name", name, "--data-dir", data, "--listen-client-urls", f"http://{ip_addr}:{client}",
            "--advertise-client-urls", f"http://{ip_addr}:{client}", "--listen-peer-urls", f"http://{ip_addr}:{peer}",
            "--initial-advertise-peer-urls", f"http://{ip_addr}:{peer}", "--initial-cluster", cluster,
            "--initial-cluster-state", "new", "--initial-cluster-token", TAG, "--log-level", "error"]


def wait_healthy(url, prefix=(), within=30, extra=()):
    """Until etcd at `url` has a leader; its status (member id, leader id). `extra`: curl's
    arguments for https (the CA, a client certificate)."""
    deadline = time.time() + within
    while time.time() < deadline:
        r = subprocess.run([*prefix, "curl", "-s", "-m", "1", *extra, "-X", "POST", url + "/v3/maintenance/status"],
                           capture_output=True, text=True)
        try:
            status = json.loads(r.stdout)
            if status.get("leader"):
                return status["header"]["member_id"], status["leader"]
        except ValueError:
            pass
        time.sleep(0.2)
    raise Failed(f"etcd at {url} has no leader within {within} s")


def case_client():
    """The client and EtcdStore (tests/unit/etcd) against one etcd on loopback."""
    need_etcd()
    if not os.access(CLIENT_TEST, os.X_OK):
        raise Failed(f"ETCD_CLIENT_TEST={CLIENT_TEST!r} is not an executable")
    with tempfile.TemporaryDirectory() as d:
        client, peer = free_port(), free_port()
        p = subprocess.Popen(etcd_cmd("one", "127.0.0.1", client, peer, f"one=http://127.0.0.1:{peer}", d + "/data"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(f"http://127.0.0.1:{client}")
            r = subprocess.run([CLIENT_TEST, "~[auth]"], env=dict(os.environ, DISTRUN_ETCD=f"127.0.0.1:{client}"),
                               capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, f"the client's cases pass: rc {r.returncode}", r.stdout + r.stderr)
        finally:
            p.kill()
            p.wait()


def case_auth():
    """An etcd with authentication enabled (a user and password, tokens that expire after 1 s):
    the client's cases, every one authenticated with the user in ETCDCTL_USER/ETCDCTL_PASSWORD
    (and the [auth] case: strangers refused, an expired token renewed); then an elastic job
    kept there, and the same job without the user, refused with a word on what to set."""
    need_etcd()
    if not os.access(CLIENT_TEST, os.X_OK):
        raise Failed(f"ETCD_CLIENT_TEST={CLIENT_TEST!r} is not an executable")
    with tempfile.TemporaryDirectory() as d:
        client, peer = free_port(), free_port()
        endpoint = f"127.0.0.1:{client}"
        # bcrypt at its lowest cost: each login (one per expired token, so one per request or
        # two on a loaded host) costs etcd a password hash, 10 of them 50-100 ms of CPU each.
        p = subprocess.Popen(etcd_cmd("one", "127.0.0.1", client, peer, f"one=http://127.0.0.1:{peer}", d + "/data") +
                             ["--auth-token", "simple", "--auth-token-ttl", "1", "--bcrypt-cost", "4"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_healthy(f"http://{endpoint}")
            password = os.urandom(8).hex()
            # As `etcdctl user add root; etcdctl auth enable` do it, through the gateway.
            for path, body in (("user/add", {"name": "root", "password": password}), ("role/add", {"name": "root"}),
                               ("user/grant", {"user": "root", "role": "root"}), ("enable", {})):
                req = urllib.request.Request(f"http://{endpoint}/v3/auth/{path}", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=10) as answer:
                    check(answer.status == 200, f"etcd's /v3/auth/{path}: HTTP {answer.status}")
            user = dict(os.environ, DISTRUN_ETCD=endpoint, ETCDCTL_USER="root", ETCDCTL_PASSWORD=password)
            r = subprocess.run([CLIENT_TEST], env=user, capture_output=True, text=True, timeout=90)
            check(r.returncode == 0, f"the client's cases pass authenticated: rc {r.returncode}", r.stdout + r.stderr)

            job = [DISTRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                   endpoint, "--rdzv-conf", "last_call_timeout=1", "--rdzv-id", TAG, "--", PYTHON, "-c", "pass"]
            user.update(DISTRUN_STORE_SECRET=SECRET)
            r = subprocess.run(job, env=user, capture_output=True, text=True, timeout=60)
            check(r.returncode == 0, f"a job kept in the etcd with authentication runs: rc {r.returncode}", r.stderr)
            stranger = {k: v for k, v in user.items() if not k.startswith("ETCDCTL_")}
            r = subprocess.run(job[:-3] + ["--rdzv-id", TAG + "s", "--", PYTHON, "-c", "pass"], env=stranger,
                               capture_output=True, text=True, timeout=60)
            check(r.returncode != 0 and "ETCDCTL_USER" in r.stderr,
                  f"without the user the job is refused, saying what to set: rc {r.returncode}", r.stderr)
        finally:
            p.kill()
            p.wait()


def make_certs(d):
    """A CA, etcd's server certificate for 127.0.0.1 and a client certificate, signed by the CA."""
    openssl = shutil.which("openssl")
    if not openssl:
        skip("openssl is not installed")
    def run(*args):
        r = subprocess.run([openssl, *args], capture_output=True, text=True, cwd=d, timeout=30)
        check(r.returncode == 0, f"openssl {args[0]}", r.stderr)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=distrun test CA", "-days", "1")
    with open(os.path.join(d, "san"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
    for name in ("server", "client"):
        run("req", "-new", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "1", "-extfile", "san")


def case_tls():
    """An etcd that asks for client certificates (--client-cert-auth) over https: the client's
    cases pass with the CA and the client's certificate in ETCDCTL_CACERT/CERT/KEY; without the
    certificate a call is refused. A job runs there with the scheme and the files given as
    torchrun gives them (--rdzv-conf, both backends' spellings), and without the certificate
    it is refused."""
    need_etcd()
    if not os.access(CLIENT_TEST, os.X_OK):
        raise Failed(f"ETCD_CLIENT_TEST={CLIENT_TEST!r} is not an executable")
    with tempfile.TemporaryDirectory() as d:
        make_certs(d)
        client, peer = free_port(), free_port()
        url = f"https://127.0.0.1:{client}"
        cmd = etcd_cmd("one", "127.0.0.1", client, peer, f"one=http://127.0.0.1:{peer}", d + "/data")
        cmd = [a.replace(f"http://127.0.0.1:{client}", url) for a in cmd]
        cmd += ["--cert-file", f"{d}/server.pem", "--key-file", f"{d}/server.key", "--client-cert-auth",
                "--trusted-ca-file", f"{d}/ca.pem"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            tls = dict(os.environ, DISTRUN_ETCD=url, ETCDCTL_CACERT=f"{d}/ca.pem", ETCDCTL_CERT=f"{d}/client.pem",
                       ETCDCTL_KEY=f"{d}/client.key")
            wait_healthy(url, ["env"], extra=["--cacert", f"{d}/ca.pem", "--cert", f"{d}/client.pem", "--key",
                                              f"{d}/client.key"])
            r = subprocess.run([CLIENT_TEST, "~[auth]"], env=tls, capture_output=True, text=True, timeout=90)
            check(r.returncode == 0, f"the client's cases pass over https with a client certificate: "
                                     f"rc {r.returncode}", r.stdout + r.stderr)
            stranger = {k: v for k, v in tls.items() if k not in ("ETCDCTL_CERT", "ETCDCTL_KEY")}
            r = subprocess.run([CLIENT_TEST, "client: put*"], env=stranger,
                               capture_output=True, text=True, timeout=60)
            check(r.returncode != 0 and "1 failed" in r.stdout, "without the client certificate a call is refused",
                  r.stdout + r.stderr)

            # torchrun's spellings: the scheme and the files in --rdzv-conf, none in the environment.
            plain = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
            plain.update(DISTRUN_STORE_SECRET=SECRET)
            spellings = {"etcd": f"protocol=https,cacert={d}/ca.pem,cert={d}/client.pem,key={d}/client.key",
                         "etcd-v2": f"protocol=HTTPS,ca_cert={d}/ca.pem,ssl_cert={d}/client.pem,"
                                    f"ssl_cert_key={d}/client.key"}
            for backend, conf in spellings.items():
                job = [DISTRUN, "--nnodes", "1:2", "--nproc-per-node", "1", "--rdzv-backend", backend,
                       "--rdzv-endpoint", f"127.0.0.1:{client}", "--rdzv-conf", f"last_call_timeout=1,{conf}",
                       "--rdzv-id", f"{TAG}-{backend}", "--", PYTHON, "-c", "pass"]
                r = subprocess.run(job, env=plain, capture_output=True, text=True, timeout=60)
                check(r.returncode == 0, f"--rdzv-backend {backend} over https with --rdzv-conf {conf}: "
                                         f"rc {r.returncode}", r.stderr)
            job[job.index("--rdzv-conf") + 1] = f"last_call_timeout=1,protocol=https,ca_cert={d}/ca.pem"
            job[job.index("--rdzv-id") + 1] = f"{TAG}-nocert"
            r = subprocess.run(job, env=plain, capture_output=True, text=True, timeout=60)
            check(r.returncode != 0, f"without the client certificate the job is refused: rc {r.returncode}",
                  r.stderr)
        finally:
            p.kill()
            p.wait()


class Cluster:
    """`agents` agent hosts and `members` etcd hosts, namespaces on one bridge; etcd started."""

    def __init__(self, agents, members):
        self.hosts = [f"{TAG}a{k}" for k in range(agents)]
        self.etcd_hosts = [f"{TAG}e{k}" for k in range(members)]
        self.addr = {ns: f"192.0.2.{10 + k}" for k, ns in enumerate(self.hosts + self.etcd_hosts)}
        self.hub = f"{TAG}hub"
        self.etcd = []

    def __enter__(self):
        need_etcd()
        if os.geteuid() != 0:
            skip("needs root to create network namespaces")
        if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
            skip("`ip netns` is not available here")
        self.dir = tempfile.mkdtemp(prefix=TAG)
        try:
            ip("netns", "add", self.hub)
            ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
            ip("-n", self.hub, "link", "set", "br0", "up")
            for k, ns in enumerate(self.hosts + self.etcd_hosts):
                ip("netns", "add", ns)
                ip("-n", self.hub, "link", "add", f"p{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
                ip("-n", self.hub, "link", "set", f"p{k}", "master", "br0", "up")
                ip("-n", ns, "addr", "add", self.addr[ns] + "/24", "dev", "eth0")
                ip("-n", ns, "link", "set", "eth0", "up")
                ip("-n", ns, "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            self.__exit__()
            skip(f"cannot create namespaces/veth/bridge here: {e.stderr.decode().strip()}")
        cluster = ",".join(f"{ns}=http://{self.addr[ns]}:2380" for ns in self.etcd_hosts)
        for ns in self.etcd_hosts:
            self.etcd.append(subprocess.Popen(["ip", "netns", "exec", ns, *etcd_cmd(
                ns, self.addr[ns], 2379, 2380, cluster, os.path.join(self.dir, ns))],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        for ns in self.etcd_hosts:
            wait_healthy(self.url(ns), ["ip", "netns", "exec", ns])
        return self

    def __exit__(self, *exc):
        for ns in self.hosts + self.etcd_hosts:
            self.kill_host(ns)
        for p in self.etcd:
            p.wait()
        for ns in [*self.hosts, *self.etcd_hosts, self.hub]:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, ns):
        return f"http://{self.addr[ns]}:2379"

    def endpoints(self):
        return ",".join(f"{self.addr[ns]}:2379" for ns in self.etcd_hosts)

    def kill_host(self, ns):
        """Every process of host `ns` gets SIGKILL at once, as when its machine dies."""
        r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
        for pid in r.stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except OSError:
                pass

    def leader(self):
        """The etcd host that leads now."""
        ids = {}
        lead = None
        for ns in self.etcd_hosts:
            try:
                ids[ns], lead = wait_healthy(self.url(ns), ["ip", "netns", "exec", ns], within=2)
            except Failed:
                continue  # a member that is down
        return next(ns for ns, i in ids.items() if i == lead)

    def agent(self, k, log, nnodes, run_id, program=None, conf="last_call_timeout=1,join_timeout=30", restarts="2"):
        env = dict(os.environ, DISTRUN_CMA="0", DISTRUN_STORE_SECRET=SECRET, ELASTIC_LOG=log)
        cmd = ["ip", "netns", "exec", self.hosts[k], DISTRUN, "--nnodes", nnodes, "--nproc-per-node", "2",
               "--rdzv-backend", "etcd-v2" if k % 2 else "etcd", "--rdzv-endpoint", self.endpoints(),
               "--rdzv-id", run_id, "--rdzv-conf", conf, "--max-restarts", restarts,
               "--monitor-interval", "0.2", "--stop-grace", "1", "--",
               *(program or [PYTHON, "-c", ELASTIC_PY, TAG, "dies", "0"])]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def lines(path):
    return elastic_lines(open(path).read()) if os.path.exists(path) else set()


def run_without_node0(c, nodes, kill_leader):
    """`nodes` agents meet (world 2*nodes); optionally the etcd leader is killed and the job
    must go on untouched; then node 0's host (agent and workers) is killed, and the others
    re-form without it and finish (the workers end once restarted)."""
    logs = [os.path.join(c.dir, f"log{k}") for k in range(nodes)]
    procs = [c.agent(k, logs[k], f"{nodes - 1}:{nodes}", TAG) for k in range(nodes)]
    world = 2 * nodes
    round0 = {(world, r, r // 2, nodes, 0) for r in range(world)}
    deadline = time.time() + 40
    while not round0 <= set().union(*map(lines, logs)):
        if time.time() > deadline or any(p.poll() is not None for p in procs):
            for p in procs:
                p.kill()
            check(False, f"round 0 never ran on every node: {[lines(l) for l in logs]}",
                         "\n".join(p.communicate()[1] for p in procs))
        time.sleep(0.1)
    if kill_leader:
        leader = c.leader()
        c.kill_host(leader)
        time.sleep(5)  # past the agents' lease TTL and an election: nobody may be declared dead
        now = set().union(*map(lines, logs))
        check(all(l[4] == 0 for l in now), f"killing the etcd leader ({leader}) restarts nothing: {sorted(now)}")
        check(all(p.poll() is None for p in procs), "every agent still runs after the leader's death",
              str([p.poll() for p in procs]))
        successor = c.leader()
        check(successor != leader, f"the cluster elected another leader ({successor}) after {leader}'s death")
        print(f"killed the etcd leader on {leader}; {successor} leads now", flush=True)
    # Node rank 0 of the round: the agent whose workers have GROUP_RANK 0 (the lowest ticket).
    dead = next(k for k in range(nodes) if (world, 0, 0, nodes, 0) in lines(logs[k]))
    c.kill_host(c.hosts[dead])
    killed = time.time()
    after = {(world - 2, r, r // 2, nodes - 1, 1) for r in range(world - 2)}
    while not after <= set().union(*(lines(l) for k, l in enumerate(logs) if k != dead)):
        check(time.time() < killed + 40, "the survivors restart within 40 s of node 0's death")
        time.sleep(0.05)
    print(f"MEASURE node 0's host killed to the survivors' workers restarted: {time.time() - killed:.2f} s", flush=True)
    res = finish([p for k, p in enumerate(procs) if k != dead], timeout=60)
    got = set()
    for rc, out, err in res:
        check(rc == 0, f"a survivor finishes: rc {rc}", out + err)
        got |= elastic_lines(out)
    check(after <= got and all(l[4] == 0 or l in after for l in got),
          f"the survivors re-formed without node 0 (world {world - 2}, restart 1): {sorted(got)}",
          "\n".join(out + err for _, out, err in res))


def case_node0_host_killed():
    """One etcd member, two agent hosts (--nnodes 1:2): node 0's host dies, node 1 goes on alone."""
    with Cluster(2, 1) as c:
        run_without_node0(c, 2, kill_leader=False)


def case_leader_and_node0_killed():
    """A 3-member etcd cluster, three agent hosts (--nnodes 2:3): the etcd leader's host dies
    (the job runs on, nobody restarts), then node 0's host: the other two re-form and finish."""
    with Cluster(3, 3) as c:
        run_without_node0(c, 3, kill_leader=True)


def settled_job(c, run_id, script, hold=False):
    """Both agents (--nnodes 1:2, the round closed once both joined) run `script(d)` under sh,
    d a folder of the case's own; with `hold`, the agent of rank 3 (its pid in d/agent) is held
    still for 3 s from before rank 1 gives up (gives_up_on_frozen). Returns (rc, out, err) of
    both, the line both print, and the seconds from the start and from the file d/fault (the
    script writes it) until both ended."""
    d = tempfile.mkdtemp(dir=c.dir)
    program = ["sh", "-c", script(d)]
    t0 = time.time()
    procs = [c.agent(k, "/dev/null", "1:2", run_id, program, conf="last_call_timeout=20,join_timeout=30,"
                     "heartbeat_timeout=30", restarts="0") for k in (0, 1)]
    if hold:
        hold_past_give_up(procs, d, 4, lambda: int(open(os.path.join(d, "agent")).read()),
                          then=lambda: time.sleep(3))
    res = finish(procs)
    end = time.time()
    stopped_at(run_id, within=5)
    check([r[0] for r in res] == [1, 1], f"both agents exit 1: {[r[0] for r in res]}", str(res))
    lines = [first_failure(r[2]) for r in res]
    check(lines[0] is not None and len(set(lines)) == 1, "the same first failure on every node", str(lines))
    fault = os.path.join(d, "gave_up" if hold else "fault")
    return res, lines[0], end - t0, end - os.path.getmtime(fault)


def case_failure_settled_once():
    """With no agent hosting the store, the first failure is still settled once (an etcd
    transaction: the first agent to settle it wins, the others read it) and every node prints
    the same line: two ranks on two nodes that fail together; then a rank frozen on one node
    that a rank of the other gives up on, while the frozen rank's agent is held still past the
    2 s the other waits for its flight report, so it finds its frozen worker (which takes the
    first place) only late."""
    with Cluster(2, 1) as c:
        mark = f"{TAG}-both"
        _, line, _, stop = settled_job(c, mark, lambda d: f'if [ "$RANK" = 1 ]; then sleep 2; : > {d}/fault; exit 3; fi; '
                                       f'if [ "$RANK" = 3 ]; then sleep 2; exit 4; fi; sleep 60 # {mark}')
        print(f"MEASURE etcd, ranks on two nodes fail together: {stop:.2f} s from the failure until both agents "
              "ended", flush=True)
        check(("rank 1:" in line and "exit code 3" in line) or ("rank 3:" in line and "exit code 4" in line),
              "the line names one of the two failed ranks with its own cause", line)
        mark = f"{TAG}-frozen"
        # Rank 3 says which agent is its own (its shim's parent) before it says it started.
        own_agent = 'if [ "$RANK" = 3 ]; then read -r _ _ _ agent _ < /proc/$PPID/stat; echo $agent > {d}/agent; fi; '
        _, line, took, stop = settled_job(c, mark, lambda d: own_agent.format(d=d) + gives_up_on_frozen(d, 3, mark),
                                          hold=True)
        print(f"MEASURE etcd, rank 1 gives up on frozen rank 3 (its agent held 3 s past it): {took:.2f} s from the "
              f"start, {stop:.2f} s from the give-up, until both agents ended", flush=True)
        check("node rank 1, rank 3:" in line and "frozen, not ended" in line,
              "every node names the frozen rank 3 on node rank 1", line)


if __name__ == "__main__":
    main({name[5:]: fn for name, fn in globals().items() if name.startswith("case_")})

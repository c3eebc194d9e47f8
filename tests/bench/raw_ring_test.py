"""scripts/bench/raw_ring.c, the program behind hosts.py's raw-TCP anchors, over loopback (no
namespaces, no root): built with cc, a ring of three ends and a ring of two (one connection both
ways) each move 4 MiB plus a byte to the next while receiving as many, speaking the lines hosts.py
waits for ("listening", "ready", then a start and finish on CLOCK_MONOTONIC), and hosts.py's
ring_rate turns their spans into a rate. A wrong byte count hangs or fails an end. Exits 77
without cc."""
import os
import shutil
import socket
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "scripts", "bench")
TOTAL = (4 << 20) + 1  # more than one of the program's 4 MiB chunks, and not a multiple of it


def check(cond, what):
    if not cond:
        sys.exit(f"FAILED: {what}")


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ring(exe, n):
    ports = free_ports(n)
    procs = []
    try:
        for i in range(n):
            mode = [("connect", "accept")[i]] if n == 2 else []
            procs.append(subprocess.Popen([exe, "127.0.0.1", str(ports[i]), "127.0.0.1", str(ports[(i + 1) % n]),
                                           str(TOTAL), *mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                          text=True))
        for want in ("listening", "ready"):
            for p in procs:
                got = p.stdout.readline().strip()
                check(got == want, f"ring of {n}: '{got}' where '{want}' was due")
            for p in procs:
                p.stdin.write("\n")
                p.stdin.flush()
        outs = [p.communicate(timeout=30)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    check(all(p.returncode == 0 for p in procs), f"ring of {n}: exits {[p.returncode for p in procs]}")
    spans = [tuple(map(float, o.split())) for o in outs]
    check(all(len(s) == 2 and s[1] > s[0] for s in spans), f"ring of {n}: spans {outs}")
    return spans


def main():
    if not shutil.which("cc"):
        print("skipped: no cc to build raw_ring.c with")
        sys.exit(77)
    sys.path.insert(0, BENCH)
    import hosts
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "raw_ring")
        subprocess.run(["cc", "-O2", "-pthread", "-o", exe, os.path.join(BENCH, "raw_ring.c")], check=True)
        for n in (3, 2):
            spans = ring(exe, n)
            rate = hosts.ring_rate(TOTAL, spans)
            check(rate > 0, f"ring of {n}: rate {rate} from spans {spans}")
        bad = subprocess.run([exe, "127.0.0.1", "1", "127.0.0.1", "2", "3", "both"], capture_output=True, text=True)
        check(bad.returncode == 2 and "usage" in bad.stderr, "an unknown mode is refused")
    print("ok")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The docs' examples work. Usage: docs_test.py CASE BIN_DIR
  paths   every repository path README.md, ARCHITECTURE.md, CONTRIBUTING.md and docs/*.md name (in
          `code` or as a link) exists: a file, or a folder when it ends with '/'
  tests   every test the docs cite (`area.subject.case`, or a pattern with * or {a,b}) is one of
          the suite's, as `CTEST -N` lists them in BUILD_DIR (docs_test.py tests CTEST BUILD_DIR)
  readme  every command line of README.md's sh blocks runs and exits 0, from a scratch folder
          that sees the repository's configs/ and scripts/ and the build's bin/ as build/bin/:
          bench sizes capped (DISTRUN_BENCH_MAX_BYTES=1M), train.py a small program that checks
          torchrun's variables, host0/host1 both on this host with a fresh port and secret file,
          s.yaml the demo scenario. What cannot run here is listed as SKIP with the reason (a
          SLURM cluster of several nodes; the setup scripts, which install packages and run
          this suite)."""
import fnmatch
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile

from areas import AREAS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "ARCHITECTURE.md", "CONTRIBUTING.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
TOP = ("apps/", "launcher/", "lib/", "configs/", "scripts/", "tests/", "docs/", "cmake/", "packaging/", ".ci/")


def named_paths(doc):
    """(line, path) for each repository path the doc names, relative to the repository root."""
    text = open(os.path.join(ROOT, doc)).read()
    out = []
    for m in re.finditer(r"\]\(([^)#\s]+)(#[^)]*)?\)", text):  # [text](target)
        target = m.group(1)
        if re.match(r"[a-z]+:", target):
            continue
        out.append((text.count("\n", 0, m.start()) + 1,
                    os.path.normpath(os.path.join(os.path.dirname(doc), target))))
    # `code` spans, and the words of fenced blocks (command lines, tables of files).
    for m in re.finditer(r"```[^\n]*\n(.*?)```|`([^`\n]+)`", text, re.S):
        for word in (m.group(1) or m.group(2)).split():
            word = word.rstrip(".,:;)")
            if not word.startswith(TOP) or re.search(r"[*<>{}$]|\.\.\.|[A-Z]{2,}", word):
                continue  # placeholders (FOLDER, <name>, *.yaml, ...), not paths
            out.append((text.count("\n", 0, m.start() + (m.group(0).find(word))) + 1, word))
    return out


def report(missing, failure, success):
    """Prints the verdict of a check over the docs: each missing item under FAIL, else PASS."""
    if missing:
        print(f"FAIL: {failure}:")
        print("\n".join("  " + m for m in missing))
        return 1
    print(f"PASS: {success}")
    return 0


def case_paths():
    missing, checked = [], 0
    for doc in DOCS:
        for line, path in named_paths(doc):
            checked += 1
            full = os.path.join(ROOT, path)
            ok = os.path.isdir(full) if path.endswith("/") else os.path.exists(full)
            if not ok:
                missing.append(f"{doc}:{line}: {path}")
    return report(missing, f"{len(missing)} of the {checked} paths the docs name do not exist",
                  f"the {checked} paths named by {len(DOCS)} docs exist")


def case_tests(ctest, build_dir):
    listing = subprocess.run([ctest, "-N"], cwd=build_dir, capture_output=True, text=True, timeout=60).stdout
    names = set(re.findall(r"Test +#\d+: (\S+)", listing))
    if len(names) < 50:
        print(f"FAIL: ctest -N in {build_dir} listed {len(names)} tests; is it the build folder?")
        return 1
    missing, checked = [], 0
    for doc in DOCS:
        text = open(os.path.join(ROOT, doc)).read()
        for m in re.finditer(r"`([^`\n]+)`", text):
            cited = m.group(1)
            if not re.fullmatch(r"(%s)\.[A-Za-z0-9_.*{},]+" % "|".join(AREAS), cited) or cited.endswith(".json"):
                continue
            checked += 1
            pattern = re.sub(r"\{[^}]*\}", "*", cited)
            if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
                missing.append(f"{doc}:{text.count(chr(10), 0, m.start()) + 1}: {cited}")
    return report(missing, f"{len(missing)} of the {checked} tests the docs cite are not in the suite",
                  f"the {checked} tests cited by {len(DOCS)} docs are in the suite ({len(names)} tests)")


def readme_commands():
    """(line number, command) of every command line in README.md's sh blocks."""
    lines = open(os.path.join(ROOT, "README.md")).read().split("\n")
    out, inside = [], False
    for i, line in enumerate(lines, 1):
        if line.startswith("```"):
            inside = line.strip() == "```sh" and not inside
            continue
        if inside and line.strip() and not line.lstrip().startswith("#"):
            out.append((i, re.sub(r"\s+#\s.*$", "", line).strip()))
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def case_readme(bin_dir):
    commands = readme_commands()
    if not commands:
        print("FAIL: no command found in README.md's sh blocks")
        return 1
    failures, ran, skipped = [], 0, 0
    with tempfile.TemporaryDirectory(prefix="distrun-readme-") as work:
        for d in ("configs", "scripts"):
            os.symlink(os.path.join(ROOT, d), os.path.join(work, d))
        os.makedirs(os.path.join(work, "build"))
        os.symlink(bin_dir, os.path.join(work, "build", "bin"))
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write("import os\n"
                    "for k in ('RANK', 'WORLD_SIZE', 'LOCAL_RANK', 'MASTER_ADDR', 'MASTER_PORT'):\n"
                    "    assert k in os.environ, k\n"
                    "assert os.environ['WORLD_SIZE'] == '4', os.environ['WORLD_SIZE']\n"
                    "print('train.py: rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'])\n")
        shutil.copy(os.path.join(ROOT, "configs", "demo.yaml"), os.path.join(work, "s.yaml"))
        secret = os.path.join(work, "job.secret")
        with open(os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
            f.write(os.urandom(16).hex() + "\n")  # as `openssl rand -hex 16` makes one
        env = dict(os.environ, DISTRUN_BENCH_MAX_BYTES="1M", OMP_NUM_THREADS="1")
        nodes, port = [], str(free_port())

        def run(line, argv, cmd_env, timeout=240):
            r = subprocess.run(argv, cwd=work, env=cmd_env, capture_output=True, text=True, timeout=timeout)
            if r.returncode != 0:
                failures.append(f"README.md:{line}: `{' '.join(argv)}` exited {r.returncode}\n"
                                f"{(r.stdout + r.stderr)[-3000:]}")

        for line, cmd in commands:
            prompt = re.match(r"(\w+)\$ (.*)", cmd)
            argv = shlex.split(prompt.group(2) if prompt else cmd)
            # VAR=value before the program is its environment, as in the shell.
            cmd_env = dict(env)
            while argv and re.match(r"^[A-Z_]+=", argv[0]):
                k, v = argv.pop(0).split("=", 1)
                cmd_env[k] = v
            program = argv[0] if argv else ""
            if program in ("scripts/run.sh", "scripts/test.sh"):
                print(f"SKIP README.md:{line}: `{cmd}`: installs packages and builds (this suite runs after it)")
                skipped += 1
                continue
            if program == "sbatch":
                print(f"SKIP README.md:{line}: `{cmd}`: needs a SLURM cluster of several nodes "
                      "(one node's SLURM runs in launcher.slurm.srun_both_ways)")
                skipped += 1
                continue
            if program == "mpirun":
                if not shutil.which("mpirun"):
                    print(f"SKIP README.md:{line}: `{cmd}`: mpirun is not installed (openmpi-bin)")
                    skipped += 1
                    continue
                extra = ["--oversubscribe"] + (["--allow-run-as-root"] if os.geteuid() == 0 else [])
                argv = argv[:1] + extra + argv[1:]
            if prompt:  # one node of a multi-node example: all of them on this host, started together
                argv = ["127.0.0.1" if a == "host0" else port if a == "29400" else a for a in argv]
                nodes.append((line, argv))
                continue
            print(f"RUN README.md:{line}: {' '.join(argv)}", flush=True)
            run(line, argv, cmd_env)
            ran += 1
        if nodes:
            print("RUN together: " + " & ".join(" ".join(a) for _, a in nodes), flush=True)
            procs = [(line, argv, subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE,
                                                  stderr=subprocess.STDOUT, text=True)) for line, argv in nodes]
            for line, argv, p in procs:
                try:
                    out, _ = p.communicate(timeout=240)
                except subprocess.TimeoutExpired:
                    p.kill()
                    out, _ = p.communicate()
                if p.returncode != 0:
                    failures.append(f"README.md:{line}: `{' '.join(argv)}` exited {p.returncode}\n{out[-3000:]}")
                ran += 1
        # --results files the commands named hold one record per rank and step at least.
        for line, cmd in commands:
            m = re.search(r"--results (\S+)", cmd)
            if m and not failures:
                path = os.path.join(work, m.group(1))
                records = open(path).read().count("\n") if os.path.exists(path) else 0
                if records < 4:
                    failures.append(f"README.md:{line}: {m.group(1)} holds {records} records, want one per rank at least")
    if failures:
        print(f"FAIL: {len(failures)} of the README's commands failed:")
        print("\n".join(failures))
        return 1
    print(f"PASS: {ran} README commands ran and exited 0 ({skipped} skipped, listed above)")
    return 0


def main():
    case = sys.argv[1]
    if case == "paths":
        return case_paths()
    if case == "tests":
        return case_tests(sys.argv[2], sys.argv[3])
    if case == "readme":
        return case_readme(os.path.abspath(sys.argv[2]))
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())

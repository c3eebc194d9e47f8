#!/usr/bin/env python3
"""The lint stage (scripts/lint.sh) on a scratch repository holding the project's .clang-format and
.clang-tidy: a clean change passes, a format violation fails, a clang-tidy finding fails, and
--fix repairs the format. Usage: lint_test.py CASE (clean, format, tidy, fix)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINT = os.path.join(ROOT, "scripts", "lint.sh")

CLEAN = """#include <string>

std::string greet(const std::string& name) { return "hello " + name; }
"""
# Only the spacing differs from CLEAN: clang-tidy has nothing to say about it.
BAD_FORMAT = """#include <string>

std::string  greet( const std::string& name ){return "hello "+name;}
"""
# Formatted, but reads a moved-from string (bugprone-use-after-move).
BAD_TIDY = """#include <string>
#include <utility>

std::string greet(std::string name) {
  std::string kept = std::move(name);
  return kept + name;
}
"""


def git(repo, *args):
    subprocess.run(["git", "-C", repo, "-c", "user.name=lint", "-c", "user.email=lint@localhost", *args],
                   check=True, capture_output=True)


def lint(repo, *extra):
    r = subprocess.run([LINT, "--root", repo, "--base", "base", *extra], capture_output=True, text=True, timeout=240)
    return r.returncode, r.stdout + r.stderr


def main():
    case = sys.argv[1]
    for tool in ("clang-format", "clang-tidy", "git"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} is not installed (scripts/deps.sh lint)")
            return 77
    with tempfile.TemporaryDirectory(prefix="distrun-lint-") as repo:
        for f in (".clang-format", ".clang-tidy"):
            shutil.copy(os.path.join(ROOT, f), repo)
        git(repo, "init", "-q")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", "base")
        git(repo, "tag", "base")
        text = {"clean": CLEAN, "format": BAD_FORMAT, "tidy": BAD_TIDY, "fix": BAD_FORMAT}[case]
        src = os.path.join(repo, "greet.cpp")
        with open(src, "w") as f:
            f.write(text)
        os.mkdir(os.path.join(repo, "build"))
        with open(os.path.join(repo, "build", "compile_commands.json"), "w") as f:
            json.dump([{"directory": repo, "file": "greet.cpp", "command": "c++ -std=c++17 -c greet.cpp"}], f)
        with open(os.path.join(repo, ".gitignore"), "w") as f:
            f.write("build/\n")
        git(repo, "add", ".")
        git(repo, "commit", "-q", "-m", case)

        if case == "fix":
            rc, out = lint(repo, "--fix")
            with open(src) as f:
                fixed = f.read()
            print(out)
            if fixed != CLEAN:
                print(f"FAIL: --fix left\n{fixed}\ninstead of\n{CLEAN}")
                return 1
            rc, out = lint(repo)
            print(out)
            return 0 if rc == 0 else 1

        rc, out = lint(repo)
        print(out)
        want = {"clean": (0, "lint: PASS"),
                "format": (1, "greet.cpp:3:12: error: code should be clang-formatted"),
                "tidy": (1, "bugprone-use-after-move")}[case]
        if rc != want[0] or want[1] not in out:
            print(f"FAIL: want exit {want[0]} and {want[1]!r}; got exit {rc}")
            return 1
        if case == "format" and "clang-tidy" in out and "bugprone" in out:
            print("FAIL: the format case should have no tidy finding")
            return 1
    print(f"PASS: {case}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

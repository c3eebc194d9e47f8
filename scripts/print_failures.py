#!/usr/bin/env python3
"""Repeats, after a failed ctest run, the end of each failed test's output.

ctest -j prints a failing test's output when the test ends, somewhere in the middle of a long
log; a CI system that keeps only the log's tail then shows which test failed but not why. This
reads the run's console output (scripts/test.sh keeps a copy: BUILD/ctest-console.log) and
prints the last lines of each failure again. ctest's own Testing/Temporary/LastTest.log is no
source for this: a test that runs ctest itself (the label check) starts that file anew.
Usage: print_failures.py CONSOLE_LOG [LINES]
"""
import re
import sys

RESULT = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (.+?) \.+\s*(\*\*\*.*?|Passed.*?)\s*$")
NEXT = re.compile(r"^\s+Start\s+\d+: |^\s*\d+/\d+ Test\s+#\d+: |^\d+% tests passed")


def failures(lines):
    """Yields (test name, result, output lines) for each test that failed (not skipped)."""
    i = 0
    while i < len(lines):
        m = RESULT.match(lines[i])
        i += 1
        if not m or not m.group(2).startswith("***") or m.group(2).startswith("***Skipped"):
            continue
        start = i
        while i < len(lines) and not NEXT.match(lines[i]):
            i += 1
        yield m.group(1), m.group(2).lstrip("*"), lines[start:i]


def main():
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    try:
        with open(sys.argv[1], encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError as e:
        print(f"distrun: no console log to repeat the failures from ({e})")
        return
    found = list(failures(lines))
    print(f"distrun: {len(found)} test(s) failed; the end of each one's output, again:")
    for name, result, output in found:
        shown = [l for l in output if l.strip()][-keep:]
        print(f"\n===== {name}: {result} (last {len(shown)} lines)")
        print("\n".join(shown))
    print("\n===== end of the failed tests' output")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Prints, after a failed ctest run, the end of each failed test's output again.

ctest -j prints a failing test's output when the test ends, somewhere in the middle of a long
log; a CI system that keeps only the log's tail then shows which test failed but not why. This
reads ctest's own records of the run (Testing/Temporary/LastTestsFailed.log and LastTest.log)
and repeats the last lines of each failure at the end. Usage: print_failures.py BUILD_DIR [LINES]
"""
import os
import sys


def outputs(log_text):
    """Yields (test name, output text, result line) per test block of LastTest.log."""
    name, lines, in_output = None, [], False
    for line in log_text.splitlines():
        if " Testing: " in line and line.split(" Testing: ", 1)[0].replace("/", "").isdigit():
            name, lines, in_output = line.split(" Testing: ", 1)[1], [], False
        elif name is not None and line == "Output:":
            in_output = True
        elif in_output and line == "<end of output>":
            in_output = False
        elif in_output:
            lines.append(line)
        elif name is not None and line.startswith("Test ") and line.endswith("."):
            yield name, lines[1:] if lines and set(lines[0]) == {"-"} else lines, line
            name = None


def main():
    build = sys.argv[1]
    keep = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    tmp = os.path.join(build, "Testing", "Temporary")
    try:
        with open(os.path.join(tmp, "LastTestsFailed.log"), encoding="utf-8", errors="replace") as f:
            failed = [line.rstrip("\n").split(":", 1)[1] for line in f if ":" in line]
        with open(os.path.join(tmp, "LastTest.log"), encoding="utf-8", errors="replace") as f:
            log = f.read()
    except OSError as e:
        print(f"distrun: no ctest records to repeat the failures from ({e})")
        return
    wanted = set(failed)
    print(f"distrun: {len(failed)} test(s) failed in {build}; the end of each one's output:")
    for name, lines, result in outputs(log):
        if name not in wanted:
            continue
        shown = lines[-keep:]
        print(f"\n===== {name}: {result} (last {len(shown)} of {len(lines)} lines)")
        print("\n".join(shown))
    print("\n===== end of the failed tests' output")


if __name__ == "__main__":
    main()

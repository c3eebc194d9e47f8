#!/usr/bin/env python3
"""Fails when a test of the suite has no area label, so `ctest -L AREA` always finds it.
Usage: label_check.py CTEST BUILD_DIR. Labels that say how a test runs (no-sanitize, netns,
load...) are not areas; each test needs at least one of AREAS."""
import json
import subprocess
import sys

AREAS = {"unit", "scenario", "launcher", "nccl", "faults", "fuzz", "package", "oracle", "bench", "suite", "store"}

ctest, build = sys.argv[1], sys.argv[2]
listing = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                                    capture_output=True, text=True).stdout)
missing = []
for test in listing["tests"]:
    labels = set()
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            labels |= set(prop["value"])
    if not labels & AREAS:
        missing.append(f"{test['name']} (labels: {sorted(labels) or 'none'})")
if missing:
    print(f"FAIL: {len(missing)} test(s) without an area label ({', '.join(sorted(AREAS))}):")
    print("\n".join("  " + m for m in missing))
    sys.exit(1)
print(f"PASS: all {len(listing['tests'])} tests carry an area label")

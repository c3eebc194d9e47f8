#!/usr/bin/env python3
"""Fails unless every test of the suite
  - is named <area>.<subject>.<case> (lower case, digits and '_', dots between; more dots allowed
    after the case, as in scenario.config.bench.all_reduce.np8), its first part being its area;
  - carries its area's label, so `ctest -L AREA` finds it;
  - carries exactly one stage label, so `scripts/test.sh STAGE` runs it exactly once.
Labels that say how a test runs (no-sanitize, netns, process, load...) are neither.
Usage: label_check.py CTEST BUILD_DIR."""
import json
import re
import subprocess
import sys

from areas import AREAS

STAGES = {"stage.lint", "stage.unit", "stage.integration"}
NAME = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+){2,}$")

ctest, build = sys.argv[1], sys.argv[2]
listing = json.loads(subprocess.run([ctest, "--show-only=json-v1"], cwd=build, check=True,
                                    capture_output=True, text=True).stdout)
problems = []
for test in listing["tests"]:
    name = test["name"]
    labels = set()
    for prop in test.get("properties", []):
        if prop["name"] == "LABELS":
            labels |= set(prop["value"])
    area = name.split(".")[0]
    if not NAME.match(name):
        problems.append(f"{name}: not <area>.<subject>.<case> in lower case")
    if area not in AREAS:
        problems.append(f"{name}: the name does not start with an area ({', '.join(sorted(AREAS))})")
    elif area not in labels:
        problems.append(f"{name}: no label of its area {area} (labels: {sorted(labels) or 'none'})")
    stages = labels & STAGES
    if len(stages) != 1:
        problems.append(f"{name}: {len(stages)} stage labels, one of {', '.join(sorted(STAGES))} wanted "
                        f"(labels: {sorted(labels) or 'none'})")
if problems:
    print(f"FAIL: {len(problems)} problem(s) in the names and labels of {len(listing['tests'])} tests:")
    print("\n".join("  " + p for p in problems))
    sys.exit(1)
by_stage = {s: sum(1 for t in listing["tests"] for p in t.get("properties", [])
                   if p["name"] == "LABELS" and s in p["value"]) for s in sorted(STAGES)}
print(f"PASS: all {len(listing['tests'])} tests are named <area>.<subject>.<case> and carry their area "
      f"and one stage ({', '.join(f'{s}: {n}' for s, n in by_stage.items())})")

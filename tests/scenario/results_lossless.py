#!/usr/bin/python3
"""--results is lossless: runs tests/scenario/data/nonfinite.yaml on 2 ranks and reads the
file back with Python's json module: inf, -inf, nan and -0.0 come back as they were, in
tensors and in objects, and YAML 1.2 keeps `n` and `y` strings.

usage: results_lossless.py RUN_RANKS WORKER SCENARIO"""
import json
import math
import os
import subprocess
import sys
import tempfile

run_ranks, worker, scenario = sys.argv[1:4]
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "r.jsonl")
    rc = subprocess.call([sys.executable, run_ranks, "--nproc", "2", "--timeout", "60", "--", worker, scenario,
                          "--results", path])
    if rc != 0:
        sys.exit(f"results_lossless: the scenario failed (exit {rc}); a non-finite value must check as equal")
    records = [json.loads(line) for line in open(path)]

problems = []
tensor = [r for r in records if r["step"] == 0 and r["rank"] == 1]
if len(tensor) != 1:
    problems.append(f"expected one record of step 0 on rank 1, got {len(tensor)}")
else:
    v = tensor[0]["values"]
    if not (v[0] == math.inf and v[1] == -math.inf and math.isnan(v[2]) and v[3] == 0 and math.copysign(1, v[3]) < 0
            and v[4] == 1.5):
        problems.append(f"tensor values came back as {v!r}, expected [inf, -inf, nan, -0.0, 1.5]")
    if tensor[0]["wrong"] != 0:
        problems.append(f"the tensor checked wrong: {tensor[0]}")
objects = [r for r in records if r["step"] == 1]
if len(objects) != 2:
    problems.append(f"expected 2 object records, got {len(objects)}")
for r in objects:
    for k, o in enumerate(r["object"]):
        ok = (o["r"] == k and o["big"] == math.inf and o["small"] == -math.inf and math.isnan(o["nan"])
              and o["word"] == "n" and o["flag"] == "y")
        if not ok:
            problems.append(f"rank {r['rank']}: object {k} came back as {o!r}")
    if r["wrong"] != 0:
        problems.append(f"rank {r['rank']}: the object checked wrong")
for p in problems:
    print("results_lossless:", p, file=sys.stderr)
print(f"results_lossless: {len(records)} records read back, {len(problems)} problems")
sys.exit(1 if problems else 0)

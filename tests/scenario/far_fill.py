#!/usr/bin/env python3
"""A fill value that only a far rank computes, past the launcher's budget of fill values, is
refused by that rank's worker before it joins, and distrun exits 2 with the worker's
file:line:col message, as for any invalid scenario.

4 ranks of 3,000,000 int8 values: the launcher evaluates ranks 0 and 3 (always) and rank 1
(within its budget of 4,194,304 values); rank 2's values only its own worker computes."""
import subprocess
import sys
import tempfile
from pathlib import Path

distrun = sys.argv[1]
with tempfile.TemporaryDirectory() as tmp:
    path = Path(tmp) / "far.yaml"
    path.write_text("world_size: 4\ntimeout: 60\ntensors:\n"
                    "  x: {shape: [3000000], fill: \"rank == 2 && i == 7 ? 1000 : 1\", dtype: int8}\n"
                    "steps:\n  - {op: all_reduce, input: x}\n")
    check = subprocess.run([distrun, "--check", str(path)], capture_output=True, text=True, timeout=120)
    run = subprocess.run([distrun, str(path)], capture_output=True, text=True, timeout=120)
expected = "far.yaml:4:31: fill 'rank == 2 && i == 7 ? 1000 : 1' gives 1000 at index 7 on rank 2"
failures = 0
if check.returncode != 0:
    print(f"FAIL the launcher's own check should pass (rank 2 is past its budget): exit {check.returncode}")
    failures += 1
if run.returncode != 2 or expected not in run.stdout + run.stderr:
    print(f"FAIL distrun: exit {run.returncode}, expected 2 and '{expected}'")
    print((run.stdout + run.stderr)[-3000:])
    failures += 1
else:
    print("ok   distrun exits 2 with rank 2's fill error")
sys.exit(1 if failures else 0)

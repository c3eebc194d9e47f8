#!/usr/bin/env python3
"""Every file in tests/scenario/bad/ is refused by `distrun --check` before any worker starts:
exit 2 and one `distrun: error: FILE:LINE:COL: message` line naming that file."""
import re
import subprocess
import sys
from pathlib import Path

distrun, bad_dir = sys.argv[1], Path(sys.argv[2])
failures = 0
files = sorted(bad_dir.glob("*.yaml"))
assert files, f"no scenarios in {bad_dir}"
for f in files:
    p = subprocess.run([distrun, "--check", "--nproc-per-node", "4", str(f)], capture_output=True, text=True, timeout=60)
    ok = p.returncode == 2 and re.search(rf"^distrun: error: {re.escape(str(f))}:\d+:\d+: \S", p.stderr, re.M)
    print(f"{'ok  ' if ok else 'FAIL'} {f.name}: exit {p.returncode}: {p.stderr.strip()[:200]}")
    failures += not ok
# An unwritable --results path is refused by the launcher too, before it starts a worker.
# So is a directory, a device or the scenario itself in its place (it would have been replaced).
scenario = str(bad_dir.parent / "data" / "all_ops.yaml")
for results in ("/nonexistent-distrun-dir/r.jsonl", str(bad_dir), "/dev/stdout", scenario):
    p = subprocess.run([distrun, "--nproc-per-node", "2", "--results", results, scenario],
                       capture_output=True, text=True, timeout=60)
    ok = p.returncode == 2 and "cannot write the results file" in p.stderr and "Rank" not in p.stdout
    print(f"{'ok  ' if ok else 'FAIL'} --results {results}: exit {p.returncode}: {p.stderr.strip()[:200]}")
    failures += not ok
sys.exit(1 if failures else 0)

#!/usr/bin/env python3
"""cmake/CatchNamedTests.cmake refuses a Catch2 test case whose name has its first ': ' at
column 77 or later (Catch2 2.13's console reporter prints such a name without end when the case
fails) and registers one whose ': ' comes before. Run on a stand-in for a test program that
lists the names it is given. Usage: catch_names_test.py CMAKE CATCH_NAMED_TESTS_CMAKE."""
import os
import shutil
import subprocess
import sys
import tempfile

cmake, script = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="distrun-catch-names-")
problems = []


def register(name):
    """Runs the registration on a program listing the one case `name`; (rc, output, registered)."""
    program = os.path.join(tmp, "test_names")
    with open(program, "w") as f:
        f.write(f"""#!/usr/bin/env python3
import sys
name = {name!r}
if "--list-test-names-only" in sys.argv:
    print(name)
else:
    print("Matching test cases:\\n  " + name + "\\n      {tmp}/test_names.cpp:1\\n      (NO DESCRIPTION)\\n")
""")
    os.chmod(program, 0o755)
    out = os.path.join(tmp, "tests.cmake")
    if os.path.exists(out):
        os.remove(out)
    r = subprocess.run([cmake, f"-DEXECUTABLE={program}", "-DAREA=unit", "-DLABELS=unit,stage.unit", "-DTIMEOUT=60",
                        "-DENVIRONMENT=", f"-DWORKING_DIR={tmp}", f"-DOUT={out}", "-P", script],
                       capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr, os.path.exists(out) and open(out).read()


for at, refused in ((10, False), (75, False), (76, True), (90, True)):
    name = "c" * at + ": the rest of the name, long enough to wrap past the console's seventy-nine columns"
    rc, output, registered = register(name)
    if refused and (rc == 0 or f"has its first ': ' at column {at + 1}" not in output):
        problems.append(f"': ' at column {at + 1}: not refused (rc {rc}): {output}")
    if not refused and (rc != 0 or "unit.names.c" not in (registered or "")):
        problems.append(f"': ' at column {at + 1}: not registered (rc {rc}): {output}")
shutil.rmtree(tmp)
if problems:
    print("FAIL:\n" + "\n".join(problems))
    sys.exit(1)
print("PASS: a first ': ' at column 77 or later is refused, one before is registered")

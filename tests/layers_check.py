#!/usr/bin/env python3
"""Fails unless the scenario layer's includes and links run downwards: lib/distrun/scenario/ is
in wings, lowest first model, load, check, output, ops, run, and a file may include its own
wing's headers and those of the wings below, never one above. Every source file of the layer
must sit in a wing. Given the build folder, it also reads each wing's object files (nm): an
object may use a symbol defined in its own wing or below, never one defined only above (a
function declared low and defined high is an upward dependency no include shows).
Before judging the tree it judges a made-up upward include and a made-up upward symbol, so a
check that cannot fail fails.
Usage: layers_check.py [ROOT [BUILD_DIR]]."""
import glob
import os
import re
import subprocess
import sys

WINGS = ["model", "load", "check", "output", "ops", "run"]
INCLUDE = re.compile(r'^\s*#\s*include\s*"distrun/scenario/([^"]*)"', re.M)


def problems_of(path, text):
    """The upward or unplaced includes of the file at `path` (relative to scenario/)."""
    wing = path.split("/")[0] if "/" in path else None
    if wing not in WINGS:
        return [f"{path}: not in a wing ({', '.join(WINGS)})"]
    out = []
    for m in INCLUDE.finditer(text):
        target = m.group(1)
        to = target.split("/")[0] if "/" in target else None
        line = text.count("\n", 0, m.start()) + 1
        if to not in WINGS:
            out.append(f"{path}:{line}: includes {target}, which is in no wing")
        elif WINGS.index(to) > WINGS.index(wing):
            out.append(f"{path}:{line}: includes {target}: {to} is above {wing}")
    return out


def symbols(obj):
    """The strong symbols `obj` defines and the symbols it uses but does not define."""
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBR":
            defined.add(parts[2])
    return defined, used


def upward_links(objects):
    """objects: {wing: [(name, defined, used)]}. The uses of a symbol that only a wing above defines."""
    home = {}
    for wing in WINGS:
        for _, defined, _ in objects.get(wing, []):
            for sym in defined:
                home.setdefault(sym, wing)  # the lowest wing defining it
    out = []
    for wing in WINGS:
        for name, _, used in objects.get(wing, []):
            for sym in sorted(used):
                to = home.get(sym)
                if to and WINGS.index(to) > WINGS.index(wing):
                    out.append((name, sym, to, wing))
    return out


def link_problems(build):
    base = os.path.join(build, "lib", "CMakeFiles", "dist.dir", "distrun", "scenario")
    objects, count = {}, 0
    for wing in WINGS:
        for obj in sorted(glob.glob(os.path.join(base, wing, "*.o"))):
            defined, used = symbols(obj)
            objects.setdefault(wing, []).append((f"{wing}/{os.path.basename(obj)}", defined, used))
            count += 1
    if not count:
        return None
    out = []
    for name, sym, to, wing in upward_links(objects):
        shown = subprocess.run(["c++filt", sym], capture_output=True, text=True).stdout.strip() or sym
        out.append(f"{name}: uses {shown}, defined in {to}, above {wing}")
    return out


def main():
    made_up = problems_of("load/loader.cpp", '#include "distrun/scenario/run/runner.hpp"\n')
    if not made_up:
        print("layers_check: an include of run/ from load/ was not found upward")
        return 1
    if not upward_links({"model": [("model/a.o", set(), {"f"})], "ops": [("ops/b.o", {"f"}, set())]}):
        print("layers_check: a symbol of ops/ used by model/ was not found upward")
        return 1
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(root, "lib", "distrun", "scenario")
    problems, files = [], 0
    for folder, _, names in os.walk(base):
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp")):
                continue
            full = os.path.join(folder, name)
            files += 1
            problems += problems_of(os.path.relpath(full, base), open(full).read())
    if len(sys.argv) > 2:
        links = link_problems(sys.argv[2])
        if links is None:
            print(f"layers_check: no object files of the scenario layer under {sys.argv[2]}")
            return 1
        problems += links
    for p in problems:
        print(p)
    if not files:
        print(f"layers_check: no source under {base}")
        return 1
    print(f"{files} files{', their objects' if len(sys.argv) > 2 else ''}: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

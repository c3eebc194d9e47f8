#!/usr/bin/env python3
"""Fails unless the scenario layer's includes run downwards: lib/distrun/scenario/ is in wings,
lowest first model, load, check, output, ops, run, and a file may include its own wing's headers
and those of the wings below, never one above. Every source file of the layer must sit in a wing.
Before judging the tree it judges a made-up upward include, so a check that cannot fail fails.
Usage: layers_check.py [ROOT]."""
import os
import re
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


def judge_tree(folder, problems_of):
    """Prints what `problems_of(path relative to ROOT/folder, text)` finds in each C++ source
    under `folder` of ROOT (argv[1], else this repository); 1 when anything, or no file."""
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = os.path.join(root, folder)
    problems, files = [], 0
    for where, _, names in os.walk(base):
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp")):
                continue
            full = os.path.join(where, name)
            files += 1
            problems += problems_of(os.path.relpath(full, base), open(full).read())
    for p in problems:
        print(p)
    if not files:
        print(f"no source under {base}")
        return 1
    print(f"{files} files, {len(problems)} problems")
    return 1 if problems else 0


def main():
    made_up = problems_of("load/loader.cpp", '#include "distrun/scenario/run/runner.hpp"\n')
    if not made_up:
        print("layers_check: an include of run/ from load/ was not found upward")
        return 1
    return judge_tree(os.path.join("lib", "distrun", "scenario"), problems_of)


if __name__ == "__main__":
    sys.exit(main())

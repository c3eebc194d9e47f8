#!/usr/bin/env python3
"""Fails unless the library's includes run downwards: the folders of lib/distrun/ are layers,
lowest first in the order lib/CMakeLists.txt writes to LAYERS (one folder a line, e.g. `host`,
`host/paths`, `scenario/model`), and a file may include the headers of its own layer and of the
layers below, never one above. Every source file sits in a layer (the deepest listed folder that
holds it), and every header it includes from distrun/ does too, but for the generated
distrun/config.hpp, which every layer may read. Before judging the tree it judges made-up upward
includes, so a check that cannot fail fails.
Usage: layers_check.py LAYERS [ROOT]."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"distrun/([^"]*)"', re.M)
GENERATED = {"config.hpp"}  # written into the build folder by CMake, below every layer


def layer_of(layers, path):
    """The deepest layer whose folder holds `path` (relative to lib/distrun/), or None."""
    folder = os.path.dirname(path)
    while folder:
        if folder in layers:
            return folder
        folder = os.path.dirname(folder)
    return None


def problems_of(layers, path, text):
    """The upward or unplaced includes of the file at `path` (relative to lib/distrun/)."""
    mine = layer_of(layers, path)
    if mine is None:
        return [f"{path}: in no layer ({', '.join(layers)})"]
    out = []
    for m in INCLUDE.finditer(text):
        target = m.group(1)
        if target in GENERATED:
            continue
        to = layer_of(layers, target)
        line = text.count("\n", 0, m.start()) + 1
        if to is None:
            out.append(f"{path}:{line}: includes distrun/{target}, which is in no layer")
        elif layers.index(to) > layers.index(mine):
            out.append(f"{path}:{line}: includes distrun/{target}: {to} is above {mine}")
    return out


def judge_tree(root, folder, problems_of, summary=""):
    """Prints what `problems_of(path relative to ROOT/folder, text)` finds in each C++ source
    under `folder` of `root`; 1 when anything, or no file."""
    base = os.path.join(root, folder)
    problems, files = [], 0
    for where, _, names in os.walk(base):
        for name in sorted(names):
            if not name.endswith((".cpp", ".hpp")):
                continue
            full = os.path.join(where, name)
            files += 1
            with open(full) as f:
                problems += problems_of(os.path.relpath(full, base), f.read())
    for p in problems:
        print(p)
    if not files:
        print(f"no source under {base}")
        return 1
    print(f"{summary}{files} files, {len(problems)} problems")
    return 1 if problems else 0


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    layers = [line.strip() for line in open(sys.argv[1]) if line.strip()]
    planted = {
        "host/algorithms.cpp": '#include "distrun/gloo/gloo_backend.hpp"\n',
        "scenario/load/loader.cpp": '#include "distrun/scenario/run/runner.hpp"\n',
        "core/tensor.cpp": '#include "distrun/nowhere/x.hpp"\n',
    }
    for path, text in planted.items():
        if not problems_of(layers, path, text):
            print(f"layers_check: the made-up include in {path} ({text.strip()}) was not found wrong")
            return 1
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return judge_tree(root, os.path.join("lib", "distrun"), lambda path, text: problems_of(layers, path, text),
                      f"{len(layers)} layers ({' < '.join(layers)}), ")


if __name__ == "__main__":
    sys.exit(main())

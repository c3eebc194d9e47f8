#!/usr/bin/env python3
"""Fails unless the library's includes run downwards: the folders of lib/distrun/ are layers,
lowest first in the order lib/CMakeLists.txt writes to LAYERS (one folder a line, e.g. `host`,
`host/paths`, `scenario/model`), and a file may include the headers of its own layer and of the
layers below, never one above. Every source file sits in a layer (the deepest listed folder that
holds it), and every header it includes from distrun/ does too, but for the generated
distrun/config.hpp, which every layer may read. Given the build folder, it also reads each
layer's object files (nm): an object may use a symbol defined in its own layer or below, never one
defined only above (a function declared low and defined high is an upward dependency no include
shows). Before judging the tree it judges made-up upward includes and a made-up upward symbol,
so a check that cannot fail fails.
Usage: layers_check.py LAYERS [ROOT [BUILD_DIR]]."""
import glob
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"distrun/([^"]*)"', re.M)
GENERATED = {"config.hpp"}  # written into the build folder by CMake, below every layer
OURS = ("_ZN7distrun", "_ZNK7distrun")  # mangled names in namespace distrun


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


def upward_links(layers, objects):
    """objects: {layer: [(name, defined, used)]}. The uses of a symbol only a layer above defines.
    Only distrun's own C++ symbols count: the C API of CUDA, which nccl/cuda_api.cpp defines
    in the place of libcudart (loaded at run time), is an external library's, whoever calls it."""
    home = {}
    for layer in layers:
        for _, defined, _ in objects.get(layer, []):
            for sym in defined:
                if sym.startswith(OURS):
                    home.setdefault(sym, layer)  # the lowest layer defining it
    out = []
    for layer in layers:
        for name, _, used in objects.get(layer, []):
            for sym in sorted(used):
                to = home.get(sym)
                if to and layers.index(to) > layers.index(layer):
                    out.append((name, sym, to, layer))
    return out


def link_problems(layers, build):
    """The upward symbol uses among the layers' objects in BUILD (lib/CMakeLists.txt makes one
    object library per layer, distrun_<layer with _ for />); None when there are none."""
    objects, count = {}, 0
    for layer in layers:
        target = "distrun_" + layer.replace("/", "_")
        for obj in sorted(glob.glob(os.path.join(build, "lib", "CMakeFiles", target + ".dir", "distrun", layer, "*.o"))):
            defined, used = symbols(obj)
            objects.setdefault(layer, []).append((f"{layer}/{os.path.basename(obj)}", defined, used))
            count += 1
    if not count:
        return None
    out = []
    for name, sym, to, layer in upward_links(layers, objects):
        shown = subprocess.run(["c++filt", sym], capture_output=True, text=True).stdout.strip() or sym
        out.append(f"{name}: uses {shown}, defined in {to}, above {layer}")
    return out


def judge_tree(root, folder, problems_of, summary="", more=()):
    """Prints what `problems_of(path relative to ROOT/folder, text)` finds in each C++ source
    under `folder` of `root`, and the problems in `more`; 1 when anything, or no file."""
    base = os.path.join(root, folder)
    problems, files = list(more), 0
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
    if not upward_links(["scenario/model", "scenario/ops"],
                        {"scenario/model": [("a.o", set(), {"_ZN7distrun1fEv"})],
                         "scenario/ops": [("b.o", {"_ZN7distrun1fEv"}, set())]}):
        print("layers_check: a symbol of scenario/ops used by scenario/model was not found upward")
        return 1
    root = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    links = []
    if len(sys.argv) > 3:
        links = link_problems(layers, sys.argv[3])
        if links is None:
            print(f"layers_check: no object files of the layers under {sys.argv[3]}")
            return 1
    return judge_tree(root, os.path.join("lib", "distrun"), lambda path, text: problems_of(layers, path, text),
                      f"{len(layers)} layers ({' < '.join(layers)}), {'their objects, ' if len(sys.argv) > 3 else ''}", links)


if __name__ == "__main__":
    sys.exit(main())

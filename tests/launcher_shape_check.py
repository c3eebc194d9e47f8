#!/usr/bin/env python3
"""Fails unless launcher/ keeps its shape:
  functions  no function defined at namespace level is over 80 lines (its first line to its
             closing brace, as clang-format lays them out: the head at column 0, `}` alone);
  modes      the kind of job (JobPlan::elastic(), single_node(), the rendezvous backend) is
             asked only where it is chosen, launcher/rendezvous/factory.cpp and its half
             factory_plan.cpp (job_plan.hpp defines the questions, job_plan.cpp has the
             factory fit the plan to them);
             everywhere else a Rendezvous answers.
Before judging the tree it judges made-up code, so a check that cannot fail fails.
Usage: launcher_shape_check.py [ROOT]."""
import os
import re
import sys

from layers_check import judge_tree

LIMIT = 80
MODE = re.compile(r"\.\s*(elastic|single_node)\s*\(\s*\)|\bbackend\s*==|rdzv_backend\s*==")
MODE_ALLOWED = {"rendezvous/factory.cpp", "rendezvous/factory_plan.cpp"}
NOT_A_FUNCTION = ("namespace", "class", "struct", "enum", "union", "using", "typedef", "template", "extern", "#")


def long_functions(path, text):
    """Functions of `text` over LIMIT lines, as "path:line: HEAD... is N lines"."""
    out = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        if not re.match(r"[A-Za-z_]", line) or line.startswith(NOT_A_FUNCTION) or line.rstrip().endswith(";"):
            i += 1
            continue
        # A head at column 0, perhaps over several lines, up to the `{` that opens the body.
        start, j = i, i
        while j < len(lines) and not lines[j].rstrip().endswith(("{", ";", "}")):
            j += 1
        if j == len(lines) or lines[j].rstrip().endswith((";", "}")) or "=" in "".join(lines[start:j + 1]).split("(")[0]:
            i = j + 1  # a declaration, a variable's initializer, or a body closed on the head's last line
            continue
        k = j + 1
        while k < len(lines) and lines[k] not in ("}", "};"):
            k += 1
        n = k - start + 1
        if n > LIMIT:
            out.append(f"{path}:{start + 1}: {line.strip()[:60]}... is {n} lines (over {LIMIT})")
        i = k + 1
    return out


def mode_questions(path, text):
    if path in MODE_ALLOWED:
        return []
    out = []
    for m in MODE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(f"{path}:{line}: asks the kind of job ({m.group(0)}) outside rendezvous/factory*.cpp")
    return out


def self_test():
    body = "\n".join(["  x();"] * (LIMIT + 1))
    planted = (f"A::A(int a)\n    : a_(a) {{}}\n\nint f(int a,\n      int b) {{\n{body}\n}}\n\n"
               f"void g() {{ y(); }}\n\nclass B {{\n{body}\n}};\n")
    found = long_functions("p.cpp", planted)
    if len(found) != 1 or not found[0].startswith("p.cpp:4:"):
        return f"a {LIMIT + 3}-line function was not found, or not alone: {found}"
    if not mode_questions("agent.cpp", "  if (plan.elastic()) x();\n  b = o.rdzv_backend == \"etcd\";\n"):
        return "plan.elastic() in agent.cpp was not found"
    if not mode_questions("job_plan.cpp", "  plan.node_rank = plan.elastic() ? 0 : o.node_rank;\n"):
        return "plan.elastic() in job_plan.cpp was not found"
    if mode_questions("rendezvous/factory.cpp", "  if (plan.single_node()) x();\n"):
        return "factory.cpp was blamed"
    return None


def main():
    broken = self_test()
    if broken:
        print(f"launcher_shape_check: {broken}")
        return 1
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return judge_tree(root, "launcher", lambda path, text: long_functions(path, text) + mode_questions(path, text))


if __name__ == "__main__":
    sys.exit(main())

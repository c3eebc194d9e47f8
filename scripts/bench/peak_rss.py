#!/usr/bin/python3
"""Peak resident memory of every process of a job: runs COMMAND, polls /proc every few
milliseconds for all its descendants' VmHWM (the kernel's own high-water mark, so a poll only
has to come before the process exits, not at its peak), and prints one JSON object:

  {"label", "rc", "largest_kb", "largest_cmd", "tree_max_kb", "processes": [{"pid", "cmd", "hwm_kb"}]}

tree_max_kb is getrusage(RUSAGE_CHILDREN).ru_maxrss after the job: the kernel folds every reaped
descendant's peak into its parent's, so it is the exact peak of the largest process of the whole
tree, even one that lived between two polls; largest_kb is the larger of that and the polled peaks.

Usage: peak_rss.py LABEL COMMAND [ARGS...]   (the command's output goes to stderr)
"""
import json
import os
import resource
import subprocess
import sys
import time

POLL_S = 0.005


def children_of():
    """Map of ppid -> [pid] over every process visible in /proc."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])  # after "pid (comm) state"
        kids.setdefault(ppid, []).append(int(name))
    return kids


def descendants(root):
    kids, out, todo = children_of(), [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def shown(arg):
    """An argument as the report shows it: a path inside the repository relative to its root,
    any other absolute path by its name, so no machine's folders reach docs/performance.md."""
    if not os.path.isabs(arg):
        return arg
    inside = os.path.relpath(arg, ROOT)
    return os.path.basename(arg) if inside.startswith("..") else inside


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            args = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return "?"
    if not args:
        return "?"
    words = [os.path.basename(args[0])] + [shown(a) for a in args[1:]]
    return " ".join(words)[:120]


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: peak_rss.py LABEL COMMAND [ARGS...]")
    label, cmd = sys.argv[1], sys.argv[2:]
    job = subprocess.Popen(cmd, stdout=sys.stderr, stderr=sys.stderr)
    seen = {}  # pid -> [cmd, hwm_kb]
    while job.poll() is None:
        for pid in descendants(job.pid):
            kb = hwm_kb(pid)
            if kb is None:
                continue
            entry = seen.setdefault(pid, ["?", 0])
            cmd = command_line(pid)  # again each time: a forked child shows its parent's until exec
            if cmd != "?":
                entry[0] = cmd
            entry[1] = max(entry[1], kb)
        time.sleep(POLL_S)
    tree_max = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    procs = sorted(({"pid": p, "cmd": c, "hwm_kb": kb} for p, (c, kb) in seen.items()), key=lambda r: -r["hwm_kb"])
    top = procs[0] if procs else {"cmd": "?", "hwm_kb": 0}
    print(json.dumps({"label": label, "rc": job.returncode, "largest_kb": max(tree_max, top["hwm_kb"]),
                      "largest_cmd": top["cmd"], "tree_max_kb": tree_max, "processes": procs}), flush=True)
    sys.exit(job.returncode)


if __name__ == "__main__":
    main()

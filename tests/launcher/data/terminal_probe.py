"""Prints what a program sees of its terminal: whether stdout and stderr are terminals, and the
columns. With `winch`, then waits for SIGWINCH (at most 30 s) and prints the columns again."""
import os
import signal
import sys


def show(tag):
    cols = os.get_terminal_size(sys.stdout.fileno()).columns if sys.stdout.isatty() else 0
    print(f"{tag} isatty {sys.stdout.isatty()} {sys.stderr.isatty()} columns {cols}", flush=True)


signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGWINCH])
show("start")
if "winch" in sys.argv[1:]:
    got = signal.sigtimedwait([signal.SIGWINCH], 30)
    show("resized" if got else "no-sigwinch")

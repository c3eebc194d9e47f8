"""Local rank 0 reads a typed line; the others must read EOF at once (argv[1]: marker)."""
import os
import sys

if os.environ["LOCAL_RANK"] == "0":
    print("prompt>", flush=True)
    print("got: " + input())
else:
    print("eof: " + repr(sys.stdin.read()))

"""Run with -m: prints how it was started."""
import os
import sys

print(f"module rank {os.environ['RANK']} name {__name__} unbuffered {not sys.stdout.line_buffering and os.environ.get('PYTHONUNBUFFERED')}")

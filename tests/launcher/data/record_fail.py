"""Rank 1 raises inside an @record'ed main, then 25 lines of teardown noise bury the traceback."""
import atexit
import os
import sys

from torch.distributed.elastic.multiprocessing.errors import record


def teardown_noise():
    for i in range(25):
        print(f"teardown noise {i}", file=sys.stderr)


@record
def main():
    if os.environ["RANK"] == "1":
        atexit.register(teardown_noise)
        raise ValueError("the root cause: bad shard 17")


main()

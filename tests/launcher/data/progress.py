"""Lines, then a progress update ending in \r, then sleeps until stopped (argv[1]: marker)."""
import os
import sys
import time

rank = os.environ["RANK"]
for i in range(3):
    print(f"line {i} of rank {rank}")
sys.stdout.write(f"progress {rank} 50%\r")
sys.stdout.flush()
time.sleep(60)

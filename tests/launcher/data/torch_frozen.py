# Rank 1 freezes itself (SIGSTOP) before an all_reduce; rank 0's gloo timeout must fail it.
# argv[1] is a marker for the test's process-table check.
import datetime
import os
import signal

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=3))
if dist.get_rank() == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
t = torch.ones(4)
dist.all_reduce(t)
print("unexpected: all_reduce finished", flush=True)

"""A job that saves a preemption checkpoint when SIGTERM arrives, slowly, as a real save to a
shared disk does. Usage: checkpoint_on_stop.py OUT_DIR SAVE_SECONDS FAILING_RANK (-1: none) MARK"""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

out, save_seconds, failing = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = torch.nn.Linear(8, 8)


def save_and_exit(signum, frame):
    time.sleep(save_seconds)
    path = os.path.join(out, f"ckpt{rank}.pt")
    torch.save({"model": model.state_dict(), "signal": signum}, path + ".tmp")
    os.rename(path + ".tmp", path)
    print(f"rank {rank} saved its checkpoint", flush=True)
    sys.exit(0)


signal.signal(signal.SIGTERM, save_and_exit)
dist.barrier()
print(f"ready {rank}", flush=True)
if rank == failing:
    sys.exit(3)
while True:
    time.sleep(0.05)

"""A few steps of DistributedDataParallel over gloo; rank 0 writes the parameters to argv[1]."""
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
gen = torch.Generator().manual_seed(100 + rank)  # each rank its own data: gradients must be averaged
for step in range(5):
    x = torch.randn(32, 8, generator=gen)
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
if rank == 0:
    torch.save([p.detach() for p in model.parameters()], sys.argv[1])
dist.destroy_process_group()

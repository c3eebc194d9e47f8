# A plain PyTorch program, as torchrun would run it: env:// rendezvous, gloo.
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
assert t.item() == world * (world + 1) / 2, t
if rank == 0:
    print(f"all_reduce ok: {t.item()}", flush=True)
objs = [None] * world
dist.all_gather_object(objs, {"rank": rank})
assert objs == [{"rank": r} for r in range(world)], objs
print(f"all_gather_object ok on rank {rank}", flush=True)
dist.destroy_process_group()

"""A 2-rank data-parallel job as people write it for torchrun: gloo on CPU, DDP, a rank's own data shard.
--mode picks the bug: healthy, explode (lr far too large, on every rank), nan_shard (corrupt rows in rank 1's
shard only), drift (rank 1 changes a weight outside DDP), uneven (rank 1 has fewer batches: it stops early
and rank 0's next all-reduce finds no partner); fsdp is the healthy run sharded by FSDP2's fully_shard."""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--mode", default="healthy")
p.add_argument("--steps", type=int, default=40)
a = p.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)  # the same init on every rank (DDP broadcasts rank 0's anyway)
if a.mode == "explode":  # a linear fit at an lr far above 2/curvature: every step overshoots further
    model, lr = DDP(nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))), 0.4
elif a.mode == "fsdp":
    from torch.distributed.fsdp import fully_shard

    model, lr = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Sequential(nn.Linear(32, 32), nn.Tanh()),
                              nn.Linear(32, 1)), 0.05
    fully_shard(model[2])
    fully_shard(model)
else:
    model, lr = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))), 0.05
opt = torch.optim.SGD(model.parameters(), lr=lr)

g = torch.Generator().manual_seed(100 + rank)  # each rank's own shard of a linear regression task
x = torch.randn(64 * a.steps, 8, generator=g)
y = x.sum(1, keepdim=True) * (1.0 if a.mode == "explode" else 0.5)
if a.mode == "nan_shard" and rank == 1:
    x[64 * 12 + 5] = float("nan")  # one corrupt row, read at step 12
steps = a.steps - 10 if a.mode == "uneven" and rank == 1 else a.steps

for step in range(steps):
    xb, yb = x[64 * step:64 * (step + 1)], y[64 * step:64 * (step + 1)]
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    opt.step()
    if a.mode == "drift" and rank == 1 and step == 15:
        with torch.no_grad():  # a "fix" applied on one rank only: the replicas are no longer the same model
            model.module[2].weight.mul_(1.5)
if rank == 0:
    print(f"rank {rank} final loss {loss.item():.4f}")
if a.mode != "uneven":  # (there rank 1 has left the lockstep: its barrier would meet rank 0's all-reduce)
    dist.barrier()  # every rank done with every collective before any rank tears gloo down
dist.destroy_process_group()

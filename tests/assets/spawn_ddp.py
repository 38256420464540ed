"""PyTorch's DDP tutorial layout: torch.multiprocessing.spawn starts one child per rank, each child calls
init_process_group itself (gloo, CPU). --mode picks the bug: healthy, nan_shard (corrupt rows in rank 1's shard
only), drift (rank 1 changes a weight outside DDP: the replicas are no longer one model), no_step (rank 1 never
calls optimizer.step(): its replica stays at the initial weights while rank 0's trains)."""
import argparse
import datetime
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world, mode, steps):
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20))
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)  # each rank's own shard of a linear regression task
    x = torch.randn(64 * steps, 8, generator=g)
    y = x.sum(1, keepdim=True) * 0.5
    if mode == "nan_shard" and rank == 1:
        x[64 * 12 + 5] = float("nan")  # one corrupt row, read at step 12
    for step in range(steps):
        xb, yb = x[64 * step:64 * (step + 1)], y[64 * step:64 * (step + 1)]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        if not (mode == "no_step" and rank == 1):
            opt.step()
        if mode == "drift" and rank == 1 and step == 15:
            with torch.no_grad():
                model.module[2].weight.mul_(1.5)
    if rank == 0:
        print(f"rank {rank} final loss {loss.item():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="healthy")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--world", type=int, default=2)
    a = p.parse_args()
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(free_port())
    mp.spawn(train, args=(a.world, a.mode, a.steps), nprocs=a.world, join=True)

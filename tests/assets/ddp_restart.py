"""A torchrun job that survives a failure by --max-restarts: rank 1 crashes at step 12 of the first attempt
(TORCHELASTIC_RESTART_COUNT 0). --resume makes every attempt save a checkpoint each step and start from the
last one (the usual elastic layout), else a restarted attempt trains from scratch. --nan-at S puts a corrupt
row into rank 1's batch of step S."""
import argparse
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--resume", action="store_true")
p.add_argument("--ckpt", default="ckpt.pt")
p.add_argument("--nan-at", type=int, default=None)  # the broken variant: a corrupt row in rank 1's shard
a = p.parse_args()

attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
# a file store per attempt: gloo's rendezvous through the agent's store is flaky on a restart (on this CPU
# build: connection refused in about 3 of 4 restarts, without neuraldbg too)
store = dist.FileStore(f"{a.ckpt}.store{attempt}", world)
dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=datetime.timedelta(seconds=20))
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
start = 0
if a.resume and os.path.exists(a.ckpt):
    state = torch.load(a.ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
g = torch.Generator().manual_seed(100 + rank)
x = torch.randn(64 * a.steps, 8, generator=g)
y = x.sum(1, keepdim=True) * 0.5
if a.nan_at is not None and rank == 1:
    x[64 * a.nan_at + 5] = float("nan")
for step in range(start, a.steps):
    if attempt == 0 and rank == 1 and step == 12:
        raise RuntimeError("rank 1 lost its device (simulated)")
    xb, yb = x[64 * step:64 * (step + 1)], y[64 * step:64 * (step + 1)]
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(xb), yb)
    loss.backward()
    opt.step()
    if a.resume and rank == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step}, a.ckpt + ".tmp")
        os.replace(a.ckpt + ".tmp", a.ckpt)
    dist.barrier()
if rank == 0:
    print(f"attempt {attempt} final loss {loss.item():.4f}")
dist.barrier()
dist.destroy_process_group()

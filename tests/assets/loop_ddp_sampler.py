"""The torchrun DDP loop of the PyTorch DDP tutorial: a DataLoader over a DistributedSampler(shuffle=True), gloo on
CPU. --set-epoch calls sampler.set_epoch(epoch) at the start of each epoch (healthy); without it the sampler draws
the same permutation every epoch. Each rank prints the first indices of each epoch's order (the same list every
epoch without --set-epoch)."""

import argparse
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

p = argparse.ArgumentParser()
p.add_argument("--set-epoch", action="store_true")
p.add_argument("--epochs", type=int, default=4)
a = p.parse_args()

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=20))
rank = dist.get_rank()
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x[:, :2].sum(1, keepdim=True)
dataset = TensorDataset(x, y, torch.arange(256))
sampler = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=16, sampler=sampler)
model = DDP(nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.05)

for epoch in range(a.epochs):
    if a.set_epoch:
        sampler.set_epoch(epoch)
    first = []
    for xb, yb, idx in loader:
        first = first or idx[:4].tolist()
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
    if rank == 0:
        print(f"epoch {epoch} first indices {first} loss {loss.item():.4f}")
dist.barrier()
dist.destroy_process_group()

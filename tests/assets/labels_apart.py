"""A classifier whose labels were shuffled with their own permutation (`--apart 1`): inputs and labels no longer
correspond, so the loss stays at chance while everything in the network is healthy. `--apart 0`: one permutation
for both (the healthy twin)."""
import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=80, apart=1)
torch.manual_seed(0)
x, y = blobs(n=1024, d=16, classes=4)
idx = torch.randperm(len(x))
x, y = x[idx], y[torch.randperm(len(y)) if a.apart else idx]  # the bug: a second permutation for the labels
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(0)
for step in range(a.steps):
    b = torch.randint(0, len(x), (64,), generator=g)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[b]), y[b])
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4g}")

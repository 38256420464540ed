"""A long run of a tiny model: prints its resident memory (MiB) at a few checkpoints as JSON.

    python zoo_long.py --steps 20000"""
import json
import os

import torch
import torch.nn as nn
from common import args

a = args(steps=20000)
torch.manual_seed(0)


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(16, 4)
y = x.sum(1, keepdim=True)
rss = {}
for step in range(a.steps):
    opt.zero_grad()
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    opt.step()
    if step + 1 in (a.steps // 10, a.steps // 2, a.steps):
        rss[step + 1] = rss_mib()
print(json.dumps({"rss": rss, "loss": loss.item()}))

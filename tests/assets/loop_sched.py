"""A classifier trained 10 epochs with SGD and StepLR(step_size=3, gamma=0.1), a schedule meant per epoch:
`--per epoch` steps it after each epoch (as meant), `--per batch` after every batch (the bug: the lr is 1000x
below its start by step 9 of 200), `--per onecycle` uses OneCycleLR stepped per batch (made for that)."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--per", default="epoch", choices=["epoch", "batch", "onecycle"])
a = p.parse_args()
g = torch.Generator().manual_seed(0)
x = torch.randn(640, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()  # 4 classes, not separable by one unit
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
if a.per == "onecycle":
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=10 * len(loader))
else:
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
for epoch in range(10):
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if a.per in ("batch", "onecycle"):
            sched.step()
    if a.per == "epoch":
        sched.step()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"epoch {epoch} loss {loss.item():.4f} train acc {acc:.3f} lr {opt.param_groups[0]['lr']:.2e}")

"""A classifier trained 10 epochs with SGD and StepLR(step_size=3, gamma=0.1), a schedule meant per epoch:
`--per epoch` steps it after each epoch (as meant), `--per batch` after every batch (the bug: the lr is 1000x
below its start by step 9 of 200), `--per onecycle` uses OneCycleLR stepped per batch (made for that).
The scheduler stepped before the optimizer (torch warns: the schedule skips its first value): `--per top` steps
StepLR at the top of each epoch (pre-1.1 code; its first value is the second one, so only the later changes come
early), `--per top_warmup` a 3-epoch linear warm-up at the top of each epoch (its first stage is lost),
`--per onecycle_first` OneCycleLR between backward() and step() in each batch. `--per amp_skip`: OneCycleLR
stepped after a GradScaler's step, which skips the first steps (an overflowing scale): the order is right."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--per", default="epoch",
               choices=["epoch", "batch", "onecycle", "top", "top_warmup", "onecycle_first", "amp_skip"])
a = p.parse_args()
g = torch.Generator().manual_seed(0)
x = torch.randn(640, 16, generator=g)
y = (x[:, :4].sum(1) > 0).long() + 2 * (x[:, 4:8].sum(1) > 0).long()  # 4 classes, not separable by one unit
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))
per_batch = a.per in ("batch", "onecycle", "onecycle_first", "amp_skip")
scaler = torch.amp.GradScaler("cpu", init_scale=3e38) if a.per == "amp_skip" else None
if a.per in ("onecycle", "onecycle_first", "amp_skip"):
    top = 0.05 / 32 if scaler is not None else 0.05  # (amp_skip sums its loss over the batch: see below)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=top, total_steps=10 * len(loader) + 1)
elif a.per == "top_warmup":
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: min(1.0, (e + 1) / 3))
else:
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.1)
for epoch in range(10):
    if a.per in ("top", "top_warmup"):
        sched.step()
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        if scaler is not None:  # summed: gradients over 1, which the scale of 3e38 overflows until it backs off
            scaler.scale(loss * len(xb)).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            if a.per == "onecycle_first":
                sched.step()
            opt.step()
        if per_batch and a.per != "onecycle_first":
            sched.step()
    if a.per == "epoch":
        sched.step()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"epoch {epoch} loss {loss.item():.4f} train acc {acc:.3f} lr {opt.param_groups[0]['lr']:.2e}")

"""Healthy training with an EMA copy of the model (deepcopy, parameters left requires_grad=True as in
common EMA helpers), updated under no_grad after each step. The EMA copy is never trained: it must not read
as unchanged weights or a missing gradient, also when it is evaluated with gradients on (--grad-eval 1)."""
import contextlib
import copy

import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=60, lr=3e-3, decay=0.9, grad_eval=0)
torch.manual_seed(0)
x, y = blobs()
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
ema = copy.deepcopy(model).eval()
opt = torch.optim.Adam(model.parameters(), lr=a.lr)
for step in range(a.steps):
    idx = torch.randint(0, len(x), (64,))
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
    with torch.no_grad():
        for pe, pm in zip(ema.parameters(), model.parameters()):
            pe.mul_(a.decay).add_(pm, alpha=1 - a.decay)
    if a.grad_eval or step % 20 == 0:
        with contextlib.nullcontext() if a.grad_eval else torch.no_grad():
            acc = (ema(x).argmax(1) == y).float().mean().item()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.3f} ema acc {acc:.3f}")
print("final loss", loss.item())

"""A regression trained by its own update loop (no torch.optim): `--sign -1` is the textbook descent
`p -= lr * p.grad`, `--sign 1` the bug that adds the gradient (gradient ascent). `--zero-after 1` zeroes each
gradient in place right after the update (the tutorials' `w.grad.data.zero_()`), instead of model.zero_grad()
before the backward pass; `--zero-after -1` zeroes nothing (the gradients add up across updates). `--accumulate k`:
k backward passes (half batches) per update, as intended accumulation."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from common import args

a = args(steps=40, lr=1e-2, sign=-1.0, zero_after=0, accumulate=1)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x @ torch.randn(8, 1, generator=g)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
for step in range(a.steps):
    if a.zero_after == 0:
        model.zero_grad()
    for part in torch.chunk(torch.arange(len(x)), a.accumulate):
        loss = F.mse_loss(model(x[part]), y[part]) / a.accumulate
        loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data += a.sign * a.lr * p.grad  # sign -1: descent; +1: the bug
            if a.zero_after == 1:
                p.grad.zero_()
print(f"final loss {loss.item():.4g}")

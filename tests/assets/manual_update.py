"""A regression trained by its own update loop (no torch.optim): `--sign -1` is the textbook descent
`p -= lr * p.grad`, `--sign 1` the bug that adds the gradient (gradient ascent). `--zero-after 1` zeroes each
gradient in place right after the update (the tutorials' `w.grad.data.zero_()`), instead of model.zero_grad()
before the backward pass."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from common import args

a = args(steps=40, lr=1e-2, sign=-1.0, zero_after=0)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x @ torch.randn(8, 1, generator=g)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
for step in range(a.steps):
    loss = F.mse_loss(model(x), y)
    if not a.zero_after:
        model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.data += a.sign * a.lr * p.grad  # sign -1: descent; +1: the bug
            if a.zero_after:
                p.grad.zero_()
print(f"final loss {loss.item():.4g}")

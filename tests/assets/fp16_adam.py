"""Pure float16 training with Adam's default eps: the model is cast with .half() (no autocast, no float32 master
weights), so Adam's state is float16 too and eps=1e-8 rounds to 0 there (float16's smallest positive is 6e-8).
A weight whose gradient is 0 (behind a ReLU that stayed off on the batch) gets 0 / (sqrt(0) + 0) = NaN at the
first step. --eps 1e-4 (verify's `adam_eps` fix) trains normally."""

import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=40, lr=1e-3, eps=1e-8)
torch.manual_seed(0)
x, y = blobs()
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2)).half()
opt = torch.optim.Adam(model.parameters(), lr=a.lr, eps=a.eps)
g = torch.Generator().manual_seed(0)
for _ in range(a.steps):
    idx = torch.randint(0, len(x), (64,), generator=g)
    loss = nn.functional.cross_entropy(model(x[idx].half()).float(), y[idx])
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")

"""A regression whose loss has a minus sign in front of it: each step makes the squared error larger."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from common import args

a = args(steps=40, lr=1e-2)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x @ torch.randn(8, 1, generator=g)
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
for step in range(a.steps):
    opt.zero_grad()
    loss = -F.mse_loss(model(x), y)  # the bug: minimising -MSE maximises the error
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4g}")

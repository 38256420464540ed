import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=40, lr=0.01)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
x, y = blobs()
x[300:310] = float("nan")  # a few corrupt rows in the data set
for step in range(a.steps):
    idx = torch.arange(step * 16, step * 16 + 64) % len(x)
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
print("final loss", loss.item())

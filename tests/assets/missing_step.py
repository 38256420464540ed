import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=40, lr=0.01)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
x, y = blobs()
for step in range(a.steps):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[:64]), y[:64])
    loss.backward()
    # bug: optimizer.step() is missing
print("final loss", loss.item())

"""Bug: the weights are put back after every step (a leftover load_state_dict of a checkpoint): the
optimizer moves them each step, yet they never change from one step to the next."""
import copy

import torch
import torch.nn as nn
from common import args, blobs

a = args(steps=40, lr=0.05)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
start = copy.deepcopy(model.state_dict())
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
x, y = blobs()
for step in range(a.steps):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x[:64]), y[:64])
    loss.backward()
    opt.step()
    model.load_state_dict(start)  # bug
print("final loss", loss.item())

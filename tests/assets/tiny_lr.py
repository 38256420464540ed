"""lr=1e-6: every update is ~1e-6 of a weight, far below a float norm's resolution, yet the weights do move."""
import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=40, lr=1e-6)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
x, y = blobs()
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps)

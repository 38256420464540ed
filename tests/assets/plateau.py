import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=60, lr=1e-6)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
x, y = blobs()
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps)

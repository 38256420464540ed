import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=60, lr=0.05)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
x, y = blobs()
# bug: maximize=True climbs the loss instead of descending it
train(model, torch.optim.SGD(model.parameters(), lr=a.lr, maximize=True), x, y, a.steps)

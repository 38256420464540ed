import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=80, lr=1.0)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))
x, y = blobs()
# bug: Adam at lr 1.0 jumps across the loss surface instead of descending it
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps)

"""Pre-training with SGD, then fine-tuning the same model with a new Adam optimizer (the first one is
still alive): the second phase's steps are training steps too."""
import torch
import torch.nn as nn
from common import args, blobs, train

a = args(steps=30)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))
x, y = blobs()
pretrain = torch.optim.SGD(model.parameters(), lr=0.05)
train(model, pretrain, x, y, a.steps)
finetune = torch.optim.Adam(model.parameters(), lr=1e-3)
train(model, finetune, x, y, a.steps, seed=1)

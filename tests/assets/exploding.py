import torch
import torch.nn as nn
from common import args, train

a = args(steps=40, lr=0.4)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True)
# bug: lr far above 2/curvature, every SGD step overshoots further
train(model, torch.optim.SGD(model.parameters(), lr=a.lr), x, y, a.steps, loss_fn=nn.MSELoss())

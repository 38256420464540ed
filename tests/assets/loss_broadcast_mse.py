import torch
import torch.nn as nn
from common import args, train

a = args(steps=150, lr=0.01, fixed=0)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(512, 8, generator=g)
y = x @ torch.randn(8, generator=g) + 0.1 * torch.randn(512, generator=g)  # targets [N]
model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))  # predictions [N, 1]
# bug: mse_loss of [256, 1] against [256] broadcasts to [256, 256]: every prediction is fitted to every target,
# so the model learns the mean and the loss stays at the targets' variance
loss_fn = (lambda p, t: nn.functional.mse_loss(p, t.unsqueeze(1))) if a.fixed else nn.functional.mse_loss
train(model, torch.optim.Adam(model.parameters(), lr=a.lr), x, y, a.steps, loss_fn=loss_fn, batch=256)

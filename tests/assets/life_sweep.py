"""Healthy hyper-parameter sweep: a new model and optimizer per trial (the old ones are dropped), each
trained a few steps on a regression it fits. No trial's model is broken; models that are gone must not
be judged, nor mistaken for the next trial's (id() reuse)."""
import torch
import torch.nn as nn
from common import args

a = args(trials=24, steps=30)
torch.manual_seed(0)
x = torch.randn(256, 8)
y = x @ torch.randn(8, 1)
results = []
for trial in range(a.trials):
    lr = 1e-3 * (1 + trial % 4)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(a.steps):
        idx = torch.randint(0, 256, (32,))
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    with torch.no_grad():
        results.append((lr, nn.functional.mse_loss(model(x), y).item()))
print("best trial", min(results, key=lambda r: r[1]))
print("final loss", loss.item())

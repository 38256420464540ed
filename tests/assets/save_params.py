"""Trains a small model with dropout and BatchNorm, then saves its parameters and RNG state to argv[1]."""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(inplace=True), nn.Dropout(0.2), nn.Linear(32, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(30):
    x = torch.randn(64, 8)
    opt.zero_grad()
    loss = ((model(x) - x.sum(1, keepdim=True)) ** 2).mean()
    loss.backward()
    opt.step()
torch.save({"state": model.state_dict(), "rng": torch.get_rng_state()}, sys.argv[1])

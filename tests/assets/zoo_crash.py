"""Trains until killed (or until the mode ends it), with events written all along: the input scale flips
every 8 steps, so with --every 1 a data_anomaly transition is written every few steps.

    python zoo_crash.py forever | raise_nan | exit | os_exit"""
import os
import sys

import torch
import torch.nn as nn

mode = sys.argv[1] if len(sys.argv) > 1 else "forever"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
step = 0
while True:
    x = torch.randn(32, 8) * (100.0 if (step // 8) % 2 else 1.0)
    if mode == "raise_nan" and step == 25:
        x[0, 0] = float("nan")  # a bad sample: NaN activations, NaN loss
    opt.zero_grad()
    loss = ((model(x) - x[:, :1]) ** 2).mean()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss.item()} at step {step}")
    loss.backward()
    opt.step()
    step += 1
    if mode == "exit" and step == 30:
        sys.exit(7)
    if mode == "os_exit" and step == 30:
        os._exit(5)

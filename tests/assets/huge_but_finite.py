"""Finite but huge values (a test asset of tests/probe/test_overflow.py): the tool must not call them non-finite."""
import sys

import torch
import torch.nn as nn

torch.manual_seed(0)
kind = sys.argv[1]
if kind == "fp32":  # finite values of ~1e23: inputs, activations, gradients (squares overflow float32)
    m = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(m.parameters(), lr=1e-30)
    for step in range(12):
        x = torch.rand(16, 8) * 1e23
        loss = m(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
else:  # half precision: values ~1e3 whose squares (and gradient norms ~1e6) overflow float16
    dtype = torch.float16 if kind == "fp16" else torch.bfloat16
    m = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256)).to(dtype)
    opt = torch.optim.SGD(m.parameters(), lr=1e-7)
    for step in range(12):
        x = (torch.rand(16, 256) * 600).to(dtype)
        loss = m(x).float().sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
for p in m.parameters():
    assert torch.isfinite(p).all() and torch.isfinite(p.grad).all(), "the script itself must stay finite"
print("grad max", max(p.grad.abs().max().item() for p in m.parameters()))

"""A training loop whose author guards the step with `except Exception` and cleans up in `finally`."""
import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.4)  # far too large: the fit blows up within a few steps
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True)
try:
    for step in range(500):
        idx = torch.arange(step * 64, step * 64 + 64) % len(x)
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        try:
            opt.step()
        except Exception as e:  # a user's guard must not swallow the stop
            print("swallowed", type(e).__name__)
    print("ran all 500 steps")
finally:
    print("cleanup ran")

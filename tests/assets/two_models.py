"""Trains model A, then a separate model B: A's leftover .grad must not read as 'A stopped changing'."""
import torch
import torch.nn as nn

torch.manual_seed(0)
x = torch.randn(256, 8)
y = x.sum(1, keepdim=True)
for name in ("a", "b"):
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for step in range(40):
        idx = torch.randint(0, 256, (32,))
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    print(name, "final loss", loss.item())

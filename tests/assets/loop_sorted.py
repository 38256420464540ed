"""A classifier trained from a DataLoader over data stored sorted by label (`--shuffle` as it should be: the
same data shuffled each epoch). Four well-separated classes, Adam, 3 epochs."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--shuffle", action="store_true")
a = p.parse_args()
g = torch.Generator().manual_seed(0)
centres = 3 * torch.randn(4, 8, generator=g)
y = torch.arange(4).repeat_interleave(160)  # sorted by label: 160 of class 0, then 1, ...
x = centres[y] + torch.randn(640, 8, generator=g)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=a.shuffle, generator=torch.Generator().manual_seed(0))
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"epoch {epoch} loss {loss.item():.4f} train acc {acc:.3f}")

"""Training in the main process from a DataLoader whose worker processes apply nn.Module transforms (as
torchvision's do): the workers load data and train nothing. --start picks their start method."""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Blobs(Dataset):
    def __init__(self, n=2048):
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(n, 16, generator=g)
        self.y = (self.x @ torch.randn(16, 3, generator=g)).argmax(1)
        self.norm = nn.Identity()  # a transform that is a module: its calls in a worker are not training

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.norm(self.x[i]), self.y[i]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--start", default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Blobs(), batch_size=64, shuffle=True, num_workers=a.workers,
                        multiprocessing_context=a.start, generator=torch.Generator().manual_seed(1))
    for epoch in range(a.epochs):
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    print(f"final loss {loss.item():.4f}")

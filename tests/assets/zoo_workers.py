"""Child processes under neuraldbg: DataLoader workers (num_workers=2) whose dataset calls a module,
a multiprocessing pool whose tasks run forward and backward, and a bare os.fork() child that leaves
through sys.exit. None of them may write into the trace or print neuraldbg output."""
import multiprocessing as mp
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Augmented(Dataset):
    """Each item goes through a small module inside the worker process."""

    def __init__(self):
        self.x, self.y = torch.randn(256, 8), torch.randint(0, 2, (256,))
        self.aug = nn.Linear(8, 8)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        with torch.enable_grad():
            return self.aug(self.x[i]).detach(), self.y[i]


def child_work(v):
    m = nn.Linear(2, 1)
    m(torch.full((1, 2), float(v))).sum().backward()
    return v * v


if __name__ == "__main__":
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Augmented(), batch_size=32, num_workers=2, shuffle=True)
    for epoch in range(2):
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
    with mp.get_context("fork").Pool(2) as pool:
        print("pool", pool.map(child_work, range(4)))
    pid = os.fork()
    if pid == 0:
        child_work(3)
        sys.exit(0)
    os.waitpid(pid, 0)
    print("final loss", round(loss.item(), 4))

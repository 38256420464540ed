"""pytorch/examples' Hogwild layout: one model in shared memory, several mp.Process children each training it
with their own optimizer and data, then the parent evaluates it. --mode picks the bug: healthy, nan_child
(child 1 reads a corrupt batch at its step 12), no_step (child 1 never calls optimizer.step()), unshared (no
`model.share_memory()`: under fork each child trains a private copy and the parent tests an untrained model).
--start picks the start method (the example uses spawn; fork is Linux's default).""" 
import argparse

import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        return F.log_softmax(self.fc2(F.relu(self.fc1(x))), dim=1)


def data(seed, n=1024):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    w = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    return x, (x @ w).argmax(1)


def train(rank, args, model):
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    x, y = data(100 + rank)
    if args.mode == "nan_child" and rank == 1:
        x[12 * 32 + 3] = float("nan")
    for step in range(args.steps):
        xb, yb = x[32 * step % len(x):][:32], y[32 * step % len(x):][:32]
        optimizer.zero_grad()
        loss = F.nll_loss(model(xb), yb)
        loss.backward()
        if not (args.mode == "no_step" and rank == 1):
            optimizer.step()
    print(f"child {rank} done, loss {loss.item():.3f}", flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="healthy")
    p.add_argument("--start", default="spawn")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    torch.manual_seed(args.seed)
    mp.set_start_method(args.start, force=True)
    model = Net()
    if args.mode != "unshared":
        model.share_memory()
    processes = []
    for rank in range(args.procs):
        proc = mp.Process(target=train, args=(rank, args, model))
        proc.start()
        processes.append(proc)
    for proc in processes:
        proc.join()
    x, y = data(7)
    with torch.no_grad():
        print(f"test loss {F.nll_loss(model(x), y).item():.3f}")

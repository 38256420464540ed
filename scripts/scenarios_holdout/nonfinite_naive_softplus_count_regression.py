"""Count regression (e.g. daily orders per store) with a positive output.

Bug: the rate must be positive, so the author wrote their own softplus,
    rate = torch.log(1 + torch.exp(z))
instead of F.softplus (which switches to the identity for large z). The
largest counts are in the hundreds (a correct model needs rates above
100), so the pre-activation z is pushed past ~88.7, where exp(z)
overflows float32 to inf (first at step 25): the PositiveRate module
outputs inf, the Poisson loss becomes inf/NaN and NaN gradients poison
every weight from that step on.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class PositiveRate(nn.Module):
    def forward(self, z):
        return torch.log(1 + torch.exp(z))


class CountModel(nn.Module):
    def __init__(self, in_dim=12, hidden=64):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)
        self.rate = PositiveRate()

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        h = F.gelu(self.fc2(h))
        return self.rate(self.out(h)).squeeze(-1)


def make_data(n=4096, in_dim=12):
    x = torch.randn(n, in_dim)
    log_mean = 3.0 + 0.6 * x[:, 0] + 0.4 * x[:, 1] - 0.3 * x[:, 2]
    counts = torch.poisson(torch.exp(log_mean))
    return x, counts


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=128)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, counts = make_data()
    model = CountModel()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        rate = model(x[idx])
        loss = F.poisson_nll_loss(rate, counts[idx], log_input=False)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} max rate {rate.max().item():.1f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

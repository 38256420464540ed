"""Tabular regression on a dataset with a few missing values.

Typical "loss becomes nan after a few iterations" report: the CSV had
empty cells that were parsed as NaN and never imputed. A handful of rows
(~0.3%) carry NaN in one feature; the first batch that contains such a
row produces a NaN loss, NaN gradients, and from then on NaN weights.
"""
import argparse

import torch
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self, in_dim=10, hidden=64):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        )

    def forward(self, x):
        return self.net(x)


def load_table(n=4000, in_dim=10):
    x = torch.randn(n, in_dim)
    y = x[:, :3].sum(dim=1, keepdim=True) + 0.1 * torch.randn(n, 1)
    missing = torch.rand(n) < 0.003
    x[missing, 4] = float("nan")  # empty CSV cells
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = load_table()
    model = Regressor()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    perm = torch.randperm(x.shape[0])
    for step in range(args.steps):
        idx = perm[step * args.batch_size:(step + 1) * args.batch_size]
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""Hyper-parameter sweep layout: a grid over learning rate and width; every trial builds a fresh model and a fresh
optimizer, trains it, records its validation loss, and drops it; the best configuration is reported.

All trials are reasonable settings that learn (the grid is 1e-3..1e-2 with Adam); nothing is broken."""
import argparse
import itertools

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_data(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 10, generator=g)
    w = torch.randn(10, 1, generator=torch.Generator().manual_seed(42))
    y = torch.tanh(x @ w / 3) + 0.05 * torch.randn(n, 1, generator=g)
    return x, y


def build_model(width):
    return nn.Sequential(nn.Linear(10, width), nn.Tanh(), nn.Linear(width, width), nn.Tanh(), nn.Linear(width, 1))


def run_trial(lr, width, steps, data, seed=0):
    torch.manual_seed(seed)
    model = build_model(width)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    (xtr, ytr), (xva, yva) = data
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(0, len(xtr), (32,), generator=g)
        loss = F.mse_loss(model(xtr[idx]), ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        return F.mse_loss(model(xva), yva).item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps-per-trial", type=int, default=60)
    args = ap.parse_args()
    data = (make_data(1024, 1), make_data(256, 2))
    grid = list(itertools.product([1e-3, 3e-3, 1e-2], [16, 32, 64]))
    results = {}
    for lr, width in grid:
        results[(lr, width)] = run_trial(lr, width, args.steps_per_trial, data)
        print(f"trial lr={lr:g} width={width}: val_loss {results[(lr, width)]:.4f}")
    best = min(results, key=results.get)
    print(f"best lr={best[0]:g} width={best[1]} val_loss {results[best]:.4f} "
          f"optimizer steps {len(grid) * args.steps_per_trial}")


if __name__ == "__main__":
    main()

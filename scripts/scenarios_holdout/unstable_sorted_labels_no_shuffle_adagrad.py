"""Tabular activity classifier (6 classes) with a DataLoader over a label-sorted table.

Bug: the training table is exported grouped by label (all class-0 rows,
then all class-1 rows, ...), and the DataLoader is built with
shuffle=False (copied from the validation loader). Each run of ~10
consecutive batches contains a single class, so the network keeps
chasing the current class: the loss drops toward zero inside a block
and jumps to large values every time the class changes. The loss curve
is a saw-tooth of spikes instead of a downward trend.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def make_sorted_table(n_per_class=200, n_classes=6, dim=12):
    centers = 1.2 * torch.randn(n_classes, dim)
    xs, ys = [], []
    for c in range(n_classes):
        xs.append(centers[c] + torch.randn(n_per_class, dim))
        ys.append(torch.full((n_per_class,), c))
    return torch.cat(xs), torch.cat(ys)  # grouped by label


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_sorted_table()
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)
    model = nn.Sequential(nn.Linear(12, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 6))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    step = 0
    while step < args.steps:
        for xb, yb in loader:
            loss = criterion(model(xb), yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"step {step:3d} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"final loss {loss.item():.4f} train acc {acc:.3f}")


if __name__ == "__main__":
    main()

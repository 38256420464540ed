"""10-class classifier defined as one nn.Sequential, trained with CrossEntropyLoss.

Bug: the Sequential was written as a repeated (Linear, ReLU) pattern and
the last ReLU was never removed, so the logits go through nn.ReLU before
CrossEntropyLoss. Cross-entropy pushes the 9 wrong-class logits down on
every sample; once a class's logit is <= 0 for every input, the ReLU
clamps it to exactly 0 and passes no gradient back, so that output unit
is dead for good. 4 of the 10 output units are dead within ~20 updates
(~85-90% of all logits are exactly 0); those classes can never be
predicted, train accuracy stays ~0.6 on well-separated blobs and the
loss stalls around 1.0.
"""
import argparse

import torch
import torch.nn as nn


def mlp(sizes):
    layers = []
    for d_in, d_out in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(d_in, d_out), nn.ReLU()]
    return nn.Sequential(*layers)


def make_blobs(n=3000, dim=20, n_classes=10):
    centers = 3.0 * torch.randn(n_classes, dim)
    y = torch.randint(0, n_classes, (n,))
    x = centers[y] + torch.randn(n, dim)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_blobs()
    model = mlp([20, 64, 64, 10])
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    with torch.no_grad():
        acc = (model(x).argmax(dim=1) == y).float().mean().item()
    print(f"final loss {loss.item():.4f} train acc {acc:.3f}")


if __name__ == "__main__":
    main()

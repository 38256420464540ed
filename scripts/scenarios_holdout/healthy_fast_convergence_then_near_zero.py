"""Control: an easy, cleanly separable problem that is solved in ~25 updates.

A small MLP (built by a factory function) classifies points that are
separated by a wide margin. The loss drops from ~0.7 to ~1e-3 within
the first ~12 steps, is ~1e-7 by step 25 and from then on sits between
0 and ~1e-6 (on some batches it is exactly 0.0 in float32, so every
gradient of that batch is exactly zero). Gradients are tiny because
there is nothing left to learn: a flat, near-zero loss is success here,
not a plateau, vanishing gradients or a broken backward pass.
"""
import argparse

import torch
import torch.nn as nn


def make_mlp(in_dim, hidden, out_dim, act=nn.SiLU):
    return nn.Sequential(nn.Linear(in_dim, hidden), act(), nn.Linear(hidden, hidden), act(), nn.Linear(hidden, out_dim))


def make_data(n=2000, dim=10, margin=2.0):
    w = torch.randn(dim)
    w = w / w.norm()
    x = torch.randn(n, dim)
    side = torch.where(torch.rand(n) < 0.5, -1.0, 1.0)
    x = x - (x @ w)[:, None] * w[None, :] + (side * (margin + torch.rand(n)))[:, None] * w[None, :]
    return x, (side > 0).long()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    model = make_mlp(10, 32, 2)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        loss = criterion(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.2e}")
    print(f"final loss {loss.item():.2e}")


if __name__ == "__main__":
    main()

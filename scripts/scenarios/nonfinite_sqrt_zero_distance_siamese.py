"""Siamese metric-learning MLP with a hand-written Euclidean distance.

Modelled on the PyTorch forum thread "How to fix gradient at 0 for sqrt
function": d/dx sqrt(x) is infinite at 0. Bug: EuclideanDistance computes
sqrt(sum((a - b)**2)) without an epsilon, and the pair sampler sometimes
pairs an item with itself (distance exactly 0). The forward pass is finite,
but the backward pass produces 0 * inf = NaN gradients in the encoder; after
that optimizer step every weight and every output is NaN.
"""
import argparse

import torch
import torch.nn as nn


class EuclideanDistance(nn.Module):
    def forward(self, a, b):
        return torch.sqrt(((a - b) ** 2).sum(dim=1))


class SiameseNet(nn.Module):
    def __init__(self, in_dim=16, emb=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, emb))
        self.distance = EuclideanDistance()

    def forward(self, a, b):
        return self.distance(self.encoder(a), self.encoder(b))


def contrastive_loss(dist, same, margin=2.0):
    return (same * dist ** 2 + (1 - same) * torch.clamp(margin - dist, min=0) ** 2).mean()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    n_items = 1024
    items = torch.randn(n_items, 16)
    cls = (items[:, 0] > 0).long()
    model = SiameseNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        i = torch.randint(0, n_items, (args.batch_size,))
        j = torch.randint(0, n_items, (args.batch_size,))
        self_pair = torch.rand(args.batch_size) < 0.01  # "positive" pairs drawn as the same item
        j = torch.where(self_pair, i, j)
        same = (cls[i] == cls[j]).float()
        optimizer.zero_grad()
        loss = contrastive_loss(model(items[i], items[j]), same)
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

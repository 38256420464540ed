"""Tabular classifier built as a deep stack of sigmoid layers.

Bug: 12 sigmoid layers with default init -> gradients shrink by ~4x per
layer, so the input-side layers receive almost no gradient signal.
"""
import argparse

import torch
import torch.nn as nn


class DeepSigmoidNet(nn.Module):
    def __init__(self, in_dim, hidden, depth, n_classes):
        super().__init__()
        self.input_proj = nn.Linear(in_dim, hidden)
        self.layers = nn.ModuleList([nn.Linear(hidden, hidden) for _ in range(depth)])
        self.act = nn.Sigmoid()
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = self.act(self.input_proj(x))
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)


def make_data(n, in_dim, n_classes):
    x = torch.randn(n, in_dim)
    teacher = torch.randn(in_dim, n_classes)
    y = (x @ teacher).argmax(dim=1)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--depth", type=int, default=12)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(1024, 20, 4)
    model = DeepSigmoidNet(20, 64, args.depth, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

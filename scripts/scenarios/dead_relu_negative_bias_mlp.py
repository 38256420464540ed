"""Tabular classifier with nn.ReLU modules and a 'sparsity' bias init.

Bug: the second hidden layer's bias is initialised to -10 (copied from a
gating trick). Every pre-activation of fc2 is far below zero, so act2
outputs exactly 0 for all inputs, its gradient is 0 and the units never
recover: the network can only learn through fc3's bias.
"""
import argparse

import torch
import torch.nn as nn


class TabularNet(nn.Module):
    def __init__(self, in_dim=20, hidden=64, n_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.act1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.act2 = nn.ReLU()
        self.fc3 = nn.Linear(hidden, n_classes)
        with torch.no_grad():
            self.fc2.bias.fill_(-10.0)

    def forward(self, x):
        x = self.act1(self.fc1(x))
        x = self.act2(self.fc2(x))
        return self.fc3(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = (x @ torch.randn(20, 3)).argmax(dim=1)
    model = TabularNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
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

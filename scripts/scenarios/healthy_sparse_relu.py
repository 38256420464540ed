"""Control: ReLU MLP whose first hidden layer is 60-73% zeros, yet every unit is alive.

fc1's biases start at -0.35, so each relu1 unit fires only for part of the
inputs (relu2 is ~25-50% zeros). This is normal ReLU sparsity, not dying
ReLU: no unit is zero for the whole batch, and the loss decreases normally.
"""
import argparse

import torch
import torch.nn as nn


class SparseMLP(nn.Module):
    def __init__(self, in_dim=16, hidden=64, n_classes=4):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.relu1 = nn.ReLU()
        self.fc2 = nn.Linear(hidden, hidden)
        self.relu2 = nn.ReLU()
        self.out = nn.Linear(hidden, n_classes)
        with torch.no_grad():
            self.fc1.bias.fill_(-0.35)

    def forward(self, x):
        x = self.relu1(self.fc1(x))
        x = self.relu2(self.fc2(x))
        return self.out(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 16)
    y = (x @ torch.randn(16, 4)).argmax(dim=1)
    model = SparseMLP()
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

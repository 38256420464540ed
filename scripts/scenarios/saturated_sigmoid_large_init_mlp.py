"""Binary classifier MLP with sigmoid hidden units and N(0, 1) init.

Bug: weights are initialised with nn.init.normal_(std=1.0) instead of a
fan-in scaled init. With 256 inputs the pre-activations have std ~16, so most
hidden sigmoids sit at 0 or 1 and pass back almost no gradient.
"""
import argparse

import torch
import torch.nn as nn


class SigmoidMLP(nn.Module):
    def __init__(self, in_dim=256, hidden=128):
        super().__init__()
        self.hidden1 = nn.Linear(in_dim, hidden)
        self.act1 = nn.Sigmoid()
        self.hidden2 = nn.Linear(hidden, hidden)
        self.act2 = nn.Sigmoid()
        self.out = nn.Linear(hidden, 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0.0, std=1.0)
                nn.init.normal_(m.bias, mean=0.0, std=1.0)

    def forward(self, x):
        x = self.act1(self.hidden1(x))
        x = self.act2(self.hidden2(x))
        return self.out(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 256)
    y = ((x[:, :8].sum(dim=1) - x[:, 8:16].sum(dim=1)) > 0).float().unsqueeze(1)
    model = SigmoidMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.BCEWithLogitsLoss()

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

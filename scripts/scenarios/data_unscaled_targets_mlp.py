"""House-price style regression with targets left in raw dollars.

Bug: the targets are ~1e4-1e5 (prices in dollars) and are not scaled, while
the features are standardised. MSE starts at ~1e9, the gradients are huge,
and Adam at lr=1e-3 needs thousands of steps just to move the output bias
to the right scale: the loss stays astronomically high.
"""
import argparse

import torch
import torch.nn as nn


class PriceModel(nn.Module):
    def __init__(self, in_dim=8, hidden=64):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(self.body(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 8)
    price = 40000.0 + 12000.0 * x[:, 0] + 5000.0 * x[:, 1] - 3000.0 * x[:, 2]
    y = price.unsqueeze(1)
    model = PriceModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

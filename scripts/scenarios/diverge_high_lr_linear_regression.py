"""Linear regression on a few raw physical features with plain SGD.

Modelled on the thermometer example in "Deep Learning with PyTorch"
(Stevens, Antiga, Viehmann), ch. 5: with too large a learning rate the
parameter updates overshoot, each step lands further from the minimum and
the loss grows geometrically until it overflows to inf.
Bug: lr=0.1 for features whose scale is ~3 (largest Hessian eigenvalue
~40, so the stable range is lr < 0.05).
"""
import argparse

import torch
import torch.nn as nn


class LinearModel(nn.Module):
    def __init__(self, in_dim=3):
        super().__init__()
        self.linear = nn.Linear(in_dim, 1)

    def forward(self, x):
        return self.linear(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 3) * torch.tensor([3.5, 2.0, 1.0])
    y = x @ torch.tensor([[0.5], [-1.0], [2.0]]) + 0.3 + 0.1 * torch.randn(2048, 1)
    model = LinearModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

"""Linear regression on un-standardised features of very different scale.

Bug: one feature has scale ~8 while the others are ~0.3 (ill-conditioned
problem) and SGD runs at an lr just below the stability limit of the stiff
direction. With mini-batch noise some batches exceed the limit and others
don't: the loss bounces up and down by large factors and never converges.
"""
import argparse

import torch
import torch.nn as nn


class Regressor(nn.Module):
    def __init__(self, in_dim=4):
        super().__init__()
        self.linear = nn.Linear(in_dim, 1)

    def forward(self, x):
        return self.linear(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.0155)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    torch.manual_seed(0)
    scales = torch.tensor([8.0, 0.3, 0.3, 0.3])
    x = torch.randn(2048, 4) * scales
    y = x @ torch.tensor([[0.2], [3.0], [-2.0], [1.0]]) + 0.05 * torch.randn(2048, 1)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

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

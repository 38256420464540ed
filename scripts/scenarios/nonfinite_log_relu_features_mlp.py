"""Count-data regressor that log-compresses its hidden features.

Modelled on the PyTorch forum thread "How to solve the loss become nan
because of using torch.log()": a log is applied to values that can be 0.
Bug: LogCompress computes torch.log(relu(h)) without an epsilon; any unit
whose pre-activation is <= 0 gives log(0) = -inf, and the next Linear turns
the mix of -inf * positive and -inf * negative weights into NaN.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class LogCompress(nn.Module):
    def forward(self, x):
        return torch.log(F.relu(x))


class CountRegressor(nn.Module):
    def __init__(self, in_dim=16, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.log_compress = LogCompress()
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        h = self.log_compress(self.fc1(x))
        h = torch.tanh(self.fc2(h))
        return self.out(h)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.rand(1024, 16) * 3.0
    y = torch.log1p(x.sum(dim=1, keepdim=True))
    model = CountRegressor()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
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

"""GRU forecaster with an auxiliary residual branch weighted by a config value.

Bug: the auxiliary branch is mixed in as `aux_weight * aux_head(h)` and the
config default for aux_weight is 0.0 (it was meant to be a warm-up value
that a schedule raises, but the schedule was never wired up). aux_head is
used in every forward pass, yet its gradient is exactly zero every step.
"""
import argparse

import torch
import torch.nn as nn


class Forecaster(nn.Module):
    def __init__(self, n_features=4, hidden=32, aux_weight=0.0):
        super().__init__()
        self.gru = nn.GRU(n_features, hidden, batch_first=True)
        self.main_head = nn.Linear(hidden, 1)
        self.aux_head = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.aux_weight = aux_weight

    def forward(self, x):
        out, _ = self.gru(x)
        h = out[:, -1]
        return self.main_head(h) + self.aux_weight * self.aux_head(h)


def make_series(n, seq_len, n_features=4):
    t = torch.arange(seq_len + 1).float()
    phase = torch.rand(n, 1) * 6.28
    base = torch.sin(0.5 * t + phase)
    x = torch.stack([base[:, :-1]] + [0.3 * torch.randn(n, seq_len) for _ in range(n_features - 1)], dim=2)
    return x, base[:, -1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=12)
    parser.add_argument("--aux-weight", type=float, default=0.0)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_series(512, args.seq_len)
    model = Forecaster(aux_weight=args.aux_weight)
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

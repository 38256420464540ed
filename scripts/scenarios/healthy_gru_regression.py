"""Control: GRU one-step-ahead forecaster on noisy sine waves."""
import argparse

import torch
import torch.nn as nn


class GRUForecaster(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def make_series(n, seq_len):
    t = torch.arange(seq_len + 1).float()
    freq = 0.2 + 0.3 * torch.rand(n, 1)
    phase = 6.28 * torch.rand(n, 1)
    s = torch.sin(freq * t + phase) + 0.05 * torch.randn(n, seq_len + 1)
    return s[:, :-1].unsqueeze(2), s[:, -1:]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=12)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_series(2048, args.seq_len)
    model = GRUForecaster()
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

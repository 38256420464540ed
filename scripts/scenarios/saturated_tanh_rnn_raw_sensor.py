"""Sensor time-series regressor with a tanh RNN fed raw readings.

Bug: the sensor channels are raw values in the hundreds (e.g. pressure in
hPa, temperature in Kelvin) and are never standardised. The input
projection inside the RNN produces pre-activations of magnitude ~100, so
nearly every hidden unit of the tanh RNN is pinned at +-1.
"""
import argparse

import torch
import torch.nn as nn


class SensorRNN(nn.Module):
    def __init__(self, n_channels=3, hidden=32):
        super().__init__()
        self.rnn = nn.RNN(n_channels, hidden, nonlinearity="tanh", batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


def make_data(n, seq_len):
    base = torch.tensor([1013.0, 293.0, 450.0])
    noise = torch.randn(n, seq_len, 3) * torch.tensor([5.0, 3.0, 20.0])
    x = base + noise
    y = (noise[:, -5:, 0].mean(dim=1, keepdim=True) / 5.0)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(256, args.seq_len)
    model = SensorRNN()
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

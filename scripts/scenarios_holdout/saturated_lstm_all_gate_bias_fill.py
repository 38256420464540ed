"""LSTM sequence classifier for multichannel sensor windows.

Bug: the author wanted the usual "forget-gate bias = 1" trick, scaled up
to forget_bias=6 for long windows, but wrote
    for name, p in lstm.named_parameters():
        if "bias" in name: p.data.fill_(forget_bias)
which fills the biases of ALL four gates (input, forget, cell, output) in
both bias_ih and bias_hh. Every sigmoid gate sits at ~1, the candidate
tanh(g) at ~+1, so the cell state climbs by ~1 per time step and the LSTM
output h = o*tanh(c) is beyond 0.99 for ~95% of units, samples and steps:
the layer is saturated, its parameters get ~1e-5 of the classifier's
gradient, and the loss stays at chance level (log 4 = 1.386).
"""
import argparse

import torch
import torch.nn as nn


class SensorLSTM(nn.Module):
    def __init__(self, n_channels=6, hidden=32, n_classes=4, forget_bias=6.0):
        super().__init__()
        self.lstm = nn.LSTM(n_channels, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, n_classes)
        for name, p in self.lstm.named_parameters():
            if "bias" in name:
                p.data.fill_(forget_bias)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.classifier(out.mean(dim=1))


def make_windows(n=1024, length=40, n_channels=6, n_classes=4):
    y = torch.randint(0, n_classes, (n,))
    t = torch.arange(length).float()
    freq = 0.1 + 0.08 * y.float()
    base = torch.sin(freq[:, None] * t[None, :])  # (n, length)
    x = base[:, :, None] * torch.randn(1, 1, n_channels) + 0.3 * torch.randn(n, length, n_channels)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_windows()
    model = SensorLSTM()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

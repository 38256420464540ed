"""LSTM activity classifier whose input pipeline changes units mid-run.

Bug: from step 60 on the data loader switches to a second shard that was
exported in different units (milli-g instead of g): the same signals
arrive multiplied by 50. The LSTM gates saturate, the loss jumps from
~0.3 to >1 and training is effectively derailed.
"""
import argparse

import torch
import torch.nn as nn


class ActivityLSTM(nn.Module):
    def __init__(self, n_channels=3, hidden=32, n_classes=3):
        super().__init__()
        self.lstm = nn.LSTM(n_channels, hidden, batch_first=True)
        self.classifier = nn.Linear(hidden, n_classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.classifier(out[:, -1])


def make_data(n, seq_len, n_classes=3):
    y = torch.randint(0, n_classes, (n,))
    t = torch.linspace(0, 6.28, seq_len)
    freq = (y.float() + 1.0).unsqueeze(1)
    base = torch.sin(freq * t.unsqueeze(0))
    x = torch.stack([base, 0.5 * base, torch.cos(freq * t)], dim=2)
    x = x + 0.3 * torch.randn(n, seq_len, 3)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(1024, args.seq_len)
    model = ActivityLSTM()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        batch = x[idx]
        if step >= 60:
            batch = batch * 50.0  # second shard exported in milli-g
        optimizer.zero_grad()
        loss = criterion(model(batch), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

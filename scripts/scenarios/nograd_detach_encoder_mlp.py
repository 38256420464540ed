"""Two-stage MLP (encoder + head) where the encoder output is detached.

Bug: `.detach()` was added to the encoder output while debugging a memory
issue ("features are only needed for logging") and never removed. No
gradient reaches the encoder: its parameters' .grad stays None and only
the head trains.
"""
import argparse

import torch
import torch.nn as nn


class EncoderHead(nn.Module):
    def __init__(self, in_dim=20, hidden=64, n_classes=4):
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU()
        )
        self.head = nn.Linear(hidden, n_classes)
        self.last_features = None

    def forward(self, x):
        features = self.encoder(x).detach()
        self.last_features = features
        return self.head(features)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = ((x[:, 0] * x[:, 1] > 0).long() * 2 + (x[:, 2] > 0).long())
    model = EncoderHead()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

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

"""CNN trained with SGD, lr=0.3 and momentum=0.99.

Bug: momentum 0.99 (copied from a large-batch recipe that also used a
long warm-up and a much smaller lr) combined with lr=0.3 on tiny batches.
The effective step is ~100x lr, so the weights keep overshooting: after a
short initial descent the loss swings between ~1e-6 and ~5-10 from one
step to the next instead of converging.
"""
import argparse

import torch
import torch.nn as nn


class ConvClassifier(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.BatchNorm2d(32),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, n_classes)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


def make_data(n, n_classes=4, size=12):
    templates = torch.randn(n_classes, 1, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--momentum", type=float, default=0.99)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = ConvClassifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""CNN trained with a hand-written SGD update that has a sign error.

Bug: the manual update does `p += lr * p.grad` instead of `p -= lr * p.grad`,
i.e. gradient ascent. The cross-entropy loss climbs steadily from log(C)
step after step instead of falling.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc = nn.Linear(16, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


def make_data(n, n_classes=4, size=12):
    templates = torch.randn(n_classes, 1, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = SmallCNN()
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        model.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p += args.lr * p.grad  # should be -=
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

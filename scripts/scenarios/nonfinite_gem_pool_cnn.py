"""Image-retrieval style CNN with generalized-mean (GeM) pooling.

Modelled on a blog post debugging NaN from a GeM pooling layer
(x**p).mean() ** (1/p) applied to features that can be negative.
Bug: GeMPool is applied directly to the conv output (no ReLU / clamp), so
the channel mean of x**3 is negative for some channels and the fractional
power (1/3) of a negative number is NaN.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class GeMPool(nn.Module):
    def __init__(self, p=3.0):
        super().__init__()
        self.p = p

    def forward(self, x):
        return x.pow(self.p).mean(dim=(2, 3)).pow(1.0 / self.p)


class RetrievalNet(nn.Module):
    def __init__(self, n_classes=6):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.pool = GeMPool()
        self.fc = nn.Linear(32, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = self.conv2(x)
        return self.fc(self.pool(x))


def make_data(n, n_classes=6, size=12):
    templates = torch.randn(n_classes, 3, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 3, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = RetrievalNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
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

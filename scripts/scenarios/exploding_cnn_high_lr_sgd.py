"""Plain CNN (no normalisation) trained with SGD + momentum at lr=0.3.

Bug: learning rate far too high for an un-normalised conv net and no
gradient clipping. Gradient norms grow by orders of magnitude over the
first few steps before the weights overflow to inf/NaN.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class PlainCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.conv3 = nn.Conv2d(32, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 3 * 3, 64)
        self.fc2 = nn.Linear(64, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.max_pool2d(F.relu(self.conv3(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def make_data(n, n_classes=4, size=12):
    templates = torch.randn(n_classes, 1, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.3)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = PlainCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

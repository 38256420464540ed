"""Small CNN with F.relu trained with plain SGD at a high learning rate.

Bug: lr=0.5 without momentum/normalisation. One large early update drives
conv2's bias/weights negative for every input, so the ReLU after conv2
outputs all zeros from then on (dead channels, zero gradients upstream).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.fc = nn.Linear(16 * 6 * 6, n_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = F.max_pool2d(x, 2)
        return self.fc(x.flatten(1))


def make_data(n, n_classes=4, size=12):
    templates = torch.rand(n_classes, 1, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.2 * torch.rand(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
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

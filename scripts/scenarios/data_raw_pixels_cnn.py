"""Digit-style CNN trained on raw uint8 pixel values.

Bug: images are converted with .float() but never divided by 255 (or
normalised), so the network sees inputs in [0, 255]. Conv activations,
logits and gradients are hundreds of times too large; with the usual
SGD(lr=0.01, momentum=0.9) the loss jumps from 15 to ~500 in two steps,
the ReLU units collapse and the loss then sits at log(10) = 2.30.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class DigitCNN(nn.Module):
    def __init__(self, n_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def make_images(n, n_classes=10, size=16):
    protos = (torch.rand(n_classes, 1, size, size) > 0.6).float()
    y = torch.randint(0, n_classes, (n,))
    noise = (torch.rand(n, 1, size, size) < 0.1).float()
    imgs = ((protos[y] + noise).clamp(0, 1) * 255).to(torch.uint8)
    return imgs, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    imgs, labels = make_images(1024)
    model = DigitCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, imgs.shape[0], (args.batch_size,))
        x = imgs[idx].float()  # missing: / 255.0
        optimizer.zero_grad()
        loss = criterion(model(x), labels[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

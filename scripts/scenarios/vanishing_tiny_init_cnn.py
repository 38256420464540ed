"""Small image classifier: 10 conv layers with tanh, custom init.

Bug: a hand-written init uses std=0.01 for every conv kernel. Each layer
shrinks activations and gradients, so the stem and first conv blocks get
gradients ~1e-10 of the head's.
"""
import argparse

import torch
import torch.nn as nn


class DeepTanhCNN(nn.Module):
    def __init__(self, channels=16, depth=10, n_classes=4):
        super().__init__()
        self.stem = nn.Conv2d(1, channels, 3, padding=1)
        self.convs = nn.ModuleList([nn.Conv2d(channels, channels, 3, padding=1) for _ in range(depth)])
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(channels, n_classes)
        self.reset_parameters()

    def reset_parameters(self):
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight, std=0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = torch.tanh(self.stem(x))
        for conv in self.convs:
            x = torch.tanh(conv(x))
        x = self.pool(x).flatten(1)
        return self.fc(x)


def make_data(n, n_classes=4, size=12):
    templates = torch.randn(n_classes, 1, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = DeepTanhCNN()
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

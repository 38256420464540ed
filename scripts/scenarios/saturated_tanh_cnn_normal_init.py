"""Small CNN with nn.Tanh activations and a std=1 weight init.

Bug: conv kernels are drawn from N(0, 1) ("init.normal_" with its default
std). conv1 has 27 inputs per output and conv2 has 144, so the tanh units
after them receive pre-activations with std ~5-12 and output +-1 almost
everywhere: the activations are saturated and gradients through them vanish.
"""
import argparse

import torch
import torch.nn as nn


class TanhCNN(nn.Module):
    def __init__(self, n_classes=5):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1),
            nn.Tanh(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1),
            nn.Tanh(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.classifier = nn.Linear(32, n_classes)
        for m in self.features:
            if isinstance(m, nn.Conv2d):
                nn.init.normal_(m.weight)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def make_data(n, n_classes=5, size=16):
    templates = torch.randn(n_classes, 3, size, size)
    y = torch.randint(0, n_classes, (n,))
    x = templates[y] + 0.5 * torch.randn(n, 3, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data(512)
    model = TanhCNN()
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

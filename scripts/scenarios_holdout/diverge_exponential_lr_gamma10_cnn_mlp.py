"""Sensor-image + scalar-features regressor (CNN branch + MLP branch), SGD with an epoch LR schedule.

Bug: the schedule was meant to decay the lr by 10x per epoch, but
ExponentialLR was given gamma=10 ("a factor of 10") instead of 0.1. The
first epochs look fine - the loss keeps falling at lr=1e-3, 1e-2 and even
1e-1 (30 updates per epoch) - but the fourth epoch starts at lr=1.0:
every update overshoots and the loss climbs by orders of magnitude per
step (0.3 -> 4 -> 3e4 -> 3e9 -> 3e28 -> inf) and turns NaN within six
updates.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class HybridRegressor(nn.Module):
    def __init__(self, n_scalar=6):
        super().__init__()
        self.cnn = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                 nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.mlp = nn.Sequential(nn.Linear(n_scalar, 16), nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, img, scalars):
        return self.head(torch.cat([self.cnn(img), self.mlp(scalars)], dim=1)).squeeze(-1)


def make_data(n=960, size=8):
    img = torch.randn(n, 2, size, size)
    scalars = torch.randn(n, 6)
    target = img[:, 0].mean(dim=(1, 2)) * 4 + img[:, 1, :4, :4].mean(dim=(1, 2)) * 2 + scalars[:, 0] - 0.5 * scalars[:, 1]
    return img, scalars, target


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    img, scalars, target = make_data()
    model = HybridRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=10)

    steps_per_epoch = img.shape[0] // args.batch_size
    for epoch in range(args.epochs):
        perm = torch.randperm(img.shape[0])
        for b in range(steps_per_epoch):
            idx = perm[b * args.batch_size:(b + 1) * args.batch_size]
            loss = F.mse_loss(model(img[idx], scalars[idx]), target[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} lr {scheduler.get_last_lr()[0]:.0e} last loss {loss.item():.4g}")
        scheduler.step()
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

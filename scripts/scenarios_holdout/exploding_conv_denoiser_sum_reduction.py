"""Fully-convolutional image denoiser trained with SGD.

Bug: the reconstruction loss uses `nn.MSELoss(reduction="sum")` (copied
from VAE code, where it is paired with Adam and a KL term), while the
learning rate was tuned for a per-pixel mean. Summing over 16 images of
24x24 pixels makes every gradient ~9000x larger than intended: the first
few SGD steps overshoot, the weights grow, and the gradients blow up
until the run turns to inf/NaN.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Denoiser(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.enc1 = nn.Conv2d(1, ch, 3, padding=1)
        self.enc2 = nn.Conv2d(ch, ch, 3, padding=1)
        self.dec = nn.Conv2d(ch, 1, 3, padding=1)

    def forward(self, x):
        h = F.leaky_relu(self.enc1(x), 0.1)
        h = F.leaky_relu(self.enc2(h), 0.1)
        return x + self.dec(h)


def make_images(n, size=24):
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, size), torch.linspace(-1, 1, size), indexing="ij")
    cx, cy, r = torch.rand(3, n, 1, 1) * torch.tensor([1.2, 1.2, 0.5]).view(3, 1, 1, 1) + torch.tensor([-0.6, -0.6, 0.2]).view(3, 1, 1, 1)
    clean = (((xx - cx) ** 2 + (yy - cy) ** 2) < r ** 2).float().unsqueeze(1)
    return clean


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--noise", type=float, default=0.3)
    args = parser.parse_args()

    torch.manual_seed(0)
    clean = make_images(512)
    model = Denoiser()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.MSELoss(reduction="sum")

    for step in range(args.steps):
        idx = torch.randint(0, clean.shape[0], (args.batch_size,))
        target = clean[idx]
        noisy = target + args.noise * torch.randn_like(target)
        loss = criterion(model(noisy), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

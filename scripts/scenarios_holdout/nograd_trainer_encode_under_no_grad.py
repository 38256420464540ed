"""Image + metadata regressor trained by a Trainer class with a shared `encode` helper.

Bug: `Trainer.encode()` was written for the evaluation/embedding-export
path and wraps the CNN encoder call in `torch.no_grad()` (to save
memory). `train_step` reuses it, so the encoder features come out of a
no-grad block: backward stops there, the encoder's parameters never get a
.grad, and only the fusion head learns (on random conv features). No
error is raised because the head's parameters still require grad.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, dim=24):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 12, 3, padding=1)
        self.conv2 = nn.Conv2d(12, dim, 3, padding=1)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.relu(self.conv2(x)).mean(dim=(2, 3))


class Regressor(nn.Module):
    def __init__(self, dim=24, meta_dim=4):
        super().__init__()
        self.encoder = Encoder(dim)
        self.fuse = nn.Sequential(nn.Linear(dim + meta_dim, 32), nn.ReLU(), nn.Linear(32, 1))

    def forward(self, feats, meta):
        return self.fuse(torch.cat([feats, meta], dim=1)).squeeze(-1)


class Trainer:
    def __init__(self, model, lr):
        self.model = model
        self.optimizer = torch.optim.RMSprop(model.parameters(), lr=lr)

    def encode(self, images):
        with torch.no_grad():
            return self.model.encoder(images)

    def train_step(self, images, meta, target):
        self.model.train()
        pred = self.model(self.encode(images), meta)
        loss = F.smooth_l1_loss(pred, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_data(n=1024, size=12):
    images = torch.randn(n, 1, size, size)
    blob = torch.zeros(1, 1, size, size)
    blob[..., 3:9, 3:9] = 1.0
    strength = torch.rand(n)
    images = images * 0.5 + strength[:, None, None, None] * blob * 2.0
    meta = torch.randn(n, 4)
    target = 3.0 * strength + 0.3 * meta[:, 0]
    return images, meta, target


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    images, meta, target = make_data()
    trainer = Trainer(Regressor(), args.lr)
    for step in range(args.steps):
        idx = torch.randint(0, images.shape[0], (args.batch_size,))
        loss = trainer.train_step(images[idx], meta[idx], target[idx])
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss:.4f}")
    print(f"final loss {loss:.4f}")


if __name__ == "__main__":
    main()

"""Tiny 1-D GAN with separate generator / discriminator optimizers.

Bug (copy-paste): the generator's optimizer was constructed from
`model.discriminator.parameters()`. The generator gets gradients from its
loss every step but none of its weights ever change; the discriminator is
instead pushed around by both optimizers.
"""
import argparse

import torch
import torch.nn as nn


class GAN(nn.Module):
    def __init__(self, z_dim=8, hidden=32):
        super().__init__()
        self.z_dim = z_dim
        self.generator = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        self.discriminator = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def sample(self, n):
        return self.generator(torch.randn(n, self.z_dim))


def real_batch(n):
    angle = torch.rand(n) * 6.2832
    return torch.stack([torch.cos(angle), torch.sin(angle)], dim=1) * 2.0 + 0.05 * torch.randn(n, 2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = GAN()
    opt_d = torch.optim.Adam(model.discriminator.parameters(), lr=args.lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(model.discriminator.parameters(), lr=args.lr, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()

    for step in range(args.steps):
        real = real_batch(args.batch_size)
        ones = torch.ones(args.batch_size, 1)
        zeros = torch.zeros(args.batch_size, 1)

        opt_d.zero_grad()
        fake = model.sample(args.batch_size).detach()
        loss_d = bce(model.discriminator(real), ones) + bce(model.discriminator(fake), zeros)
        loss_d.backward()
        opt_d.step()

        opt_g.zero_grad()
        loss_g = bce(model.discriminator(model.sample(args.batch_size)), ones)
        loss_g.backward()
        opt_g.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss_d {loss_d.item():.4f} loss_g {loss_g.item():.4f}")
    print(f"final loss_d {loss_d.item():.4f} loss_g {loss_g.item():.4f}")


if __name__ == "__main__":
    main()

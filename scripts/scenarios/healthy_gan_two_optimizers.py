"""Control: tiny 1-D GAN (generator + discriminator, two Adam optimizers).

Trains stably: the discriminator loss hovers around 2*log(2) and the
generator loss around log(2)-1 as the generated ring matches the data.
Adversarial losses are not supposed to decrease monotonically.
"""
import argparse

import torch
import torch.nn as nn


class GAN(nn.Module):
    def __init__(self, z_dim=4, hidden=32):
        super().__init__()
        self.z_dim = z_dim
        self.generator = nn.Sequential(nn.Linear(z_dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.discriminator = nn.Sequential(nn.Linear(1, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def sample(self, n):
        return self.generator(torch.randn(n, self.z_dim))


def real_batch(n):
    return 1.5 + 0.5 * torch.randn(n, 1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = GAN()
    opt_d = torch.optim.Adam(model.discriminator.parameters(), lr=args.lr, betas=(0.5, 0.999))
    opt_g = torch.optim.Adam(model.generator.parameters(), lr=args.lr, betas=(0.5, 0.999))
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
            fake_mean = fake.mean().item()
            print(f"step {step:4d} loss_d {loss_d.item():.4f} loss_g {loss_g.item():.4f} fake_mean {fake_mean:.3f}")
    print(f"final loss_d {loss_d.item():.4f} loss_g {loss_g.item():.4f} fake_mean {model.sample(512).mean().item():.3f}")


if __name__ == "__main__":
    main()

"""WGAN-GP layout (the PyTorch-GAN wgan_gp / "Improved Training of Wasserstein GANs" recipe): MLP generator and
critic (no sigmoid, no BatchNorm in the critic), two Adam optimizers with betas (0.5, 0.999), critic loss
-mean(D(real)) + mean(D(fake)) + lambda * gradient penalty, where the penalty is computed with
torch.autograd.grad(create_graph=True) on random interpolates; the generator is updated once every n_critic
batches with loss -mean(D(G(z))).

Data: the classic 2-D toy, 8 Gaussians on a ring of radius 2, sampled fresh each batch from a seeded generator.
Healthy: the critic's Wasserstein estimate shrinks and the generated points move onto the ring (mean distance to
the nearest mode falls)."""
import argparse
import math

import torch
import torch.nn as nn

LATENT = 4


class Generator(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(LATENT, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                   nn.Linear(hidden, 2))

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self, hidden=64):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(2, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, hidden),
                                   nn.LeakyReLU(0.2), nn.Linear(hidden, 1))

    def forward(self, x):
        return self.model(x)


MODES = torch.tensor([[2 * math.cos(2 * math.pi * k / 8), 2 * math.sin(2 * math.pi * k / 8)] for k in range(8)])


def sample_real(n, g):
    idx = torch.randint(0, 8, (n,), generator=g)
    return MODES[idx] + 0.05 * torch.randn(n, 2, generator=g)


def mode_distance(x):
    return torch.cdist(x, MODES).min(dim=1).values.mean().item()


def compute_gradient_penalty(D, real, fake):
    alpha = torch.rand(real.size(0), 1)
    interpolates = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d_interpolates = D(interpolates)
    gradients = torch.autograd.grad(outputs=d_interpolates, inputs=interpolates,
                                    grad_outputs=torch.ones_like(d_interpolates),
                                    create_graph=True, retain_graph=True, only_inputs=True)[0]
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--n-batches", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--n-critic", type=int, default=5)
    ap.add_argument("--lambda-gp", type=float, default=10.0)
    opt = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    generator, discriminator = Generator(), Discriminator()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    fixed_z = torch.randn(512, LATENT)
    for i in range(opt.n_batches):
        real = sample_real(opt.batch_size, g)
        # ---------------------  Train Discriminator (critic)
        optimizer_D.zero_grad()
        z = torch.randn(opt.batch_size, LATENT)
        fake = generator(z)
        real_validity = discriminator(real)
        fake_validity = discriminator(fake.detach())
        gradient_penalty = compute_gradient_penalty(discriminator, real, fake.detach())
        d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + opt.lambda_gp * gradient_penalty
        d_loss.backward()
        optimizer_D.step()
        # ---------------------  Train Generator every n_critic batches
        if i % opt.n_critic == 0:
            optimizer_G.zero_grad()
            g_loss = -torch.mean(discriminator(generator(z)))
            g_loss.backward()
            optimizer_G.step()
        if i % 50 == 0 or i == opt.n_batches - 1:
            with torch.no_grad():
                dist = mode_distance(generator(fixed_z))
            w = (torch.mean(real_validity) - torch.mean(fake_validity)).item()
            print(f"[Batch {i}/{opt.n_batches}] [D loss: {d_loss.item():.4f}] [G loss: {g_loss.item():.4f}] "
                  f"[W estimate: {w:.4f}] [mode distance: {dist:.3f}]")


if __name__ == "__main__":
    main()

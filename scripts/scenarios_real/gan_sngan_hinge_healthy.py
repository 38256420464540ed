"""SN-GAN in the layout of the spectral-normalisation GAN references (pfnet-research/sngan_projection, the
torch.nn.utils.parametrizations.spectral_norm docs and the many PyTorch SNGAN ports): every Linear of the
discriminator is wrapped in `torch.nn.utils.parametrizations.spectral_norm` (its weight is recomputed from
`parametrizations.weight.original` divided by the largest singular value, estimated by one power iteration per
forward in training mode, with the u/v vectors kept as buffers), LeakyReLU(0.1); the generator is an MLP with
BatchNorm1d and ReLU. Hinge loss: D minimises relu(1 - D(x)) + relu(1 + D(G(z))), G minimises -D(G(z)).
Adam lr 2e-4, betas (0.5, 0.999) for both, one D step then one G step per batch, 400 batches.

Data: a 5 x 5 grid of Gaussians in 2-D (std 0.05, spacing 1), sampled in code, seeded. Progress is measured by
the mean distance of generated points to their nearest mode and by how many of the 25 modes are hit."""
import argparse

import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import spectral_norm

GRID = torch.stack(torch.meshgrid(torch.arange(-2.0, 3.0), torch.arange(-2.0, 3.0), indexing="ij"), -1).reshape(-1, 2)


def sample_real(n, g):
    idx = torch.randint(0, GRID.shape[0], (n,), generator=g)
    return GRID[idx] + 0.05 * torch.randn(n, 2, generator=g)


class Generator(nn.Module):
    def __init__(self, latent_dim=8, hidden=128):
        super().__init__()
        self.model = nn.Sequential(
            nn.Linear(latent_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(True),
            nn.Linear(hidden, hidden), nn.BatchNorm1d(hidden), nn.ReLU(True),
            nn.Linear(hidden, 2))

    def forward(self, z):
        return self.model(z)


class Discriminator(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.model = nn.Sequential(
            spectral_norm(nn.Linear(2, hidden)), nn.LeakyReLU(0.1),
            spectral_norm(nn.Linear(hidden, hidden)), nn.LeakyReLU(0.1),
            spectral_norm(nn.Linear(hidden, 1)))

    def forward(self, x):
        return self.model(x)


def mode_stats(points):
    d = torch.cdist(points, GRID)
    dist, nearest = d.min(dim=1)
    return dist.mean().item(), len(set(nearest[dist < 0.25].tolist()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-batches", type=int, default=400)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--latent-dim", type=int, default=8)
    opt = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    generator, discriminator = Generator(opt.latent_dim), Discriminator()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    for i in range(opt.n_batches):
        real = sample_real(opt.batch_size, g)
        z = torch.randn(opt.batch_size, opt.latent_dim)
        # ---- discriminator: hinge loss
        optimizer_D.zero_grad()
        fake = generator(z).detach()
        d_loss = torch.relu(1.0 - discriminator(real)).mean() + torch.relu(1.0 + discriminator(fake)).mean()
        d_loss.backward()
        optimizer_D.step()
        # ---- generator
        optimizer_G.zero_grad()
        g_loss = -discriminator(generator(torch.randn(opt.batch_size, opt.latent_dim))).mean()
        g_loss.backward()
        optimizer_G.step()
        if i % 50 == 0 or i == opt.n_batches - 1:
            generator.eval()
            with torch.no_grad():
                dist, modes = mode_stats(generator(torch.randn(2000, opt.latent_dim)))
            generator.train()
            print(f"[Batch {i}/{opt.n_batches}] [D loss: {d_loss.item():.4f}] [G loss: {g_loss.item():.4f}] "
                  f"[dist to mode {dist:.3f}] [modes {modes}/25]")


if __name__ == "__main__":
    main()

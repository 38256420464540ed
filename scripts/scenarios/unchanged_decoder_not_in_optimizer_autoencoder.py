"""Denoising autoencoder whose optimizer only sees the encoder.

Bug: the optimizer was built from `model.encoder.parameters()` (left over
from an encoder-pretraining experiment). The decoder receives gradients
every step but its weights are never updated, so reconstruction quality
is capped by the random decoder.
"""
import argparse

import torch
import torch.nn as nn


class DenoisingAE(nn.Module):
    def __init__(self, in_dim=32, latent=8):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 64), nn.ReLU(), nn.Linear(64, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 64), nn.ReLU(), nn.Linear(64, in_dim))

    def forward(self, x):
        return self.decoder(self.encoder(x))


def make_data(n, in_dim=32, latent=8):
    z = torch.randn(n, latent)
    mix = torch.randn(latent, in_dim) / latent ** 0.5
    return torch.tanh(z @ mix)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--noise", type=float, default=0.1)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = make_data(2048)
    model = DenoisingAE()
    optimizer = torch.optim.Adam(model.encoder.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, data.shape[0], (args.batch_size,))
        clean = data[idx]
        noisy = clean + args.noise * torch.randn_like(clean)
        optimizer.zero_grad()
        loss = criterion(model(noisy), clean)
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

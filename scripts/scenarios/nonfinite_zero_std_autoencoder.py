"""Tabular autoencoder with in-model per-batch feature standardisation.

Bug: BatchStandardize divides by the per-batch std without an epsilon.
Column 0 is a rare binary flag (active in ~15% of rows); whenever a batch
contains no active row that column has std 0, giving 0/0 = NaN. The NaN
then propagates through backward into every weight.
"""
import argparse

import torch
import torch.nn as nn


class BatchStandardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(dim=0)) / x.std(dim=0)


class TabularAutoencoder(nn.Module):
    def __init__(self, in_dim=12, latent=4):
        super().__init__()
        self.standardize = BatchStandardize()
        self.encoder = nn.Sequential(nn.Linear(in_dim, 32), nn.ReLU(), nn.Linear(32, latent))
        self.decoder = nn.Sequential(nn.Linear(latent, 32), nn.ReLU(), nn.Linear(32, in_dim))

    def forward(self, x):
        x = self.standardize(x)
        return self.decoder(self.encoder(x)), x


def make_data(n, in_dim=12):
    x = torch.randn(n, in_dim)
    x[:, 0] = (torch.rand(n) < 0.15).float()
    return x


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    data = make_data(2048)
    model = TabularAutoencoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, data.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        recon, target = model(data[idx])
        loss = criterion(recon, target.detach())
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

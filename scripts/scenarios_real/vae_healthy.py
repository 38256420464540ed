"""Variational auto-encoder in the pytorch/examples vae layout: fc1 -> (fc21 = mu, fc22 = logvar), the
reparameterization trick (std = exp(0.5 * logvar), z = mu + eps * std with a sampled eps), decoder fc3 -> fc4 ->
sigmoid; loss = binary cross-entropy summed over pixels + the KL term -0.5 * sum(1 + logvar - mu^2 - exp(logvar));
Adam lr 1e-3; per-epoch train and test averages per sample, the test pass under model.eval() / torch.no_grad().

Data: 10x10 binary-ish images made in code (a bar of random orientation and position, slightly blurred),
seeded. Prints the per-sample loss like the example does."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

PIX = 100


class VAE(nn.Module):
    def __init__(self, hidden=64, latent=4):
        super().__init__()
        self.fc1 = nn.Linear(PIX, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, PIX)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, PIX))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, PIX), reduction="sum")
    KLD = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return BCE + KLD


def make_bars(n, seed):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(10.0), torch.arange(10.0), indexing="ij")
    theta = torch.rand(n, 1, 1, generator=g) * 3.1416
    c = torch.rand(n, 1, 2, generator=g) * 4 + 3
    d = (xx - c[..., 0:1]) * torch.sin(theta) - (yy - c[..., 1:2]) * torch.cos(theta)
    return torch.exp(-d ** 2 / 1.5).clamp(0, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    train_data, test_data = make_bars(2048, 1), make_bars(256, 2)
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(train_data),
                                               batch_size=args.batch_size, shuffle=True)
    model = VAE()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    for epoch in range(1, args.epochs + 1):
        model.train()
        train_loss = 0
        for batch_idx, (data,) in enumerate(train_loader):
            optimizer.zero_grad()
            recon_batch, mu, logvar = model(data)
            loss = loss_function(recon_batch, data, mu, logvar)
            loss.backward()
            train_loss += loss.item()
            optimizer.step()
            if batch_idx % 16 == 0:
                print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_data)}]\tLoss: "
                      f"{loss.item() / len(data):.4f}")
        print(f"====> Epoch: {epoch} Average loss: {train_loss / len(train_data):.4f}")
        model.eval()
        with torch.no_grad():
            recon, mu, logvar = model(test_data)
            test_loss = loss_function(recon, test_data, mu, logvar).item() / len(test_data)
        print(f"====> Test set loss: {test_loss:.4f}")


if __name__ == "__main__":
    main()

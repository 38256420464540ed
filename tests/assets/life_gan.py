"""Healthy GAN in the DCGAN tutorial layout: separate G and D models, D trained on D(G(z).detach()) and
D(real) with optD, then G through D(G(z)) with optG. D's input is G's output (not data) except D(real)."""
import torch
import torch.nn as nn
from common import args

a = args(steps=60, lr=5e-4, real_scale=1.0)  # --real-scale 300: unnormalised real samples (broken)
torch.manual_seed(0)
G = nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2))
D = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
opt_d = torch.optim.Adam(D.parameters(), lr=a.lr, betas=(0.5, 0.999))
opt_g = torch.optim.Adam(G.parameters(), lr=a.lr, betas=(0.5, 0.999))
bce = nn.BCEWithLogitsLoss()
center = torch.tensor([2.0, -1.0])
for step in range(a.steps):
    real = (center + 0.3 * torch.randn(64, 2)) * a.real_scale
    ones, zeros = torch.ones(64, 1), torch.zeros(64, 1)
    D.zero_grad()
    fake = G(torch.randn(64, 4))
    err_fake = bce(D(fake.detach()), zeros)  # D sees G's samples first: they are not data
    err_fake.backward()
    err_real = bce(D(real), ones)
    err_real.backward()
    opt_d.step()
    G.zero_grad()
    err_g = bce(D(fake), ones)
    err_g.backward()
    opt_g.step()
print("final loss", (err_real + err_fake).item(), err_g.item())

"""A GAN in the DCGAN example layout (pytorch/examples dcgan): netD.zero_grad() then D's backward on real and
fake batches and optimizerD.step(); netG.zero_grad() then G's backward through D and optimizerG.step(). G's
backward also adds to D's gradients after D's step; D's own zero_grad() clears them before D's next backward
(healthy). `--zero-d no` drops netD.zero_grad() (the bug: D's steps apply every gradient so far, its own and
G's)."""
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--zero-d", default="yes", choices=["yes", "no"])
parser.add_argument("--steps", type=int, default=80)
args = parser.parse_args()

torch.manual_seed(0)
nz = 4
netG = nn.Sequential(nn.Linear(nz, 32), nn.ReLU(), nn.Linear(32, 2))
netD = nn.Sequential(nn.Linear(2, 32), nn.LeakyReLU(0.2), nn.Linear(32, 1))
criterion = nn.BCEWithLogitsLoss()
optimizerD = torch.optim.Adam(netD.parameters(), lr=5e-4, betas=(0.5, 0.999))
optimizerG = torch.optim.Adam(netG.parameters(), lr=5e-4, betas=(0.5, 0.999))
real_label, fake_label = 1.0, 0.0
center = torch.tensor([2.0, -1.0])
for i in range(args.steps):
    real = center + 0.3 * torch.randn(64, 2)
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    if args.zero_d == "yes":
        netD.zero_grad()
    label = torch.full((64, 1), real_label)
    errD_real = criterion(netD(real), label)
    errD_real.backward()
    fake = netG(torch.randn(64, nz))
    label.fill_(fake_label)
    errD_fake = criterion(netD(fake.detach()), label)
    errD_fake.backward()
    errD = errD_real + errD_fake
    optimizerD.step()
    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(real_label)
    errG = criterion(netD(fake), label)
    errG.backward()
    optimizerG.step()
    if i % 20 == 0:
        print(f"[{i}/{args.steps}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}")

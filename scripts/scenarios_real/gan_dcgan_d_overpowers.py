"""Broken DCGAN (discriminator wins outright): the healthy gan_dcgan_healthy.py with two defaults changed the way
tutorials do by mistake: D's learning rate is 10x G's (--lr-d 2e-3) and G minimizes the original minimax
objective log(1 - D(G(z))) (the "saturating" loss of the GAN paper) instead of the non-saturating
-log D(G(z)). D quickly separates real from fake, D(G(z)) -> 0, and the gradient of log(1 - D(G(z))) w.r.t. D's
logit is -D(G(z)) -> 0: G stops learning.

DCGAN layout: separate Generator and Discriminator modules (ConvTranspose2d / Conv2d + BatchNorm), a
weights_init applied to both, two Adam optimizers with betas (0.5, 0.999), BCELoss; each iteration updates D on a
real batch and a detached fake batch, then G through D with real labels.

Data: 16x16 single-channel "blobs" (a Gaussian bump at a random place) in [-1, 1], made in code. Healthy: the
adversarial losses hover instead of falling, which is what a balanced GAN does."""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim

NZ, NGF, NDF = 8, 16, 16


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        nn.init.normal_(m.weight.data, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        nn.init.normal_(m.weight.data, 1.0, 0.02)
        nn.init.constant_(m.bias.data, 0)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(NZ, NGF * 2, 4, 1, 0, bias=False), nn.BatchNorm2d(NGF * 2), nn.ReLU(True),   # 4x4
            nn.ConvTranspose2d(NGF * 2, NGF, 4, 2, 1, bias=False), nn.BatchNorm2d(NGF), nn.ReLU(True),      # 8x8
            nn.ConvTranspose2d(NGF, 1, 4, 2, 1, bias=False), nn.Tanh())                                     # 16x16

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, NDF, 4, 2, 1, bias=False), nn.LeakyReLU(0.2, inplace=True),                         # 8x8
            nn.Conv2d(NDF, NDF * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(NDF * 2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(NDF * 2, 1, 4, 1, 0, bias=False), nn.Sigmoid())                                      # 1x1

    def forward(self, x):
        return self.main(x).view(-1)


def real_images(n, g):
    yy, xx = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    cy, cx = torch.rand(n, 1, 1, generator=g) * 10 + 3, torch.rand(n, 1, 1, generator=g) * 10 + 3
    bump = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 8.0)
    return (bump * 2 - 1).unsqueeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--lr-d", type=float, default=2e-3)
    ap.add_argument("--niter", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=32)
    opt = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    netG, netD = Generator(), Discriminator()
    netG.apply(weights_init)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(16, NZ, 1, 1)
    real_label, fake_label = 1.0, 0.0
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr_d, betas=(0.5, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(0.5, 0.999))
    iters = 0
    for i in range(opt.niter):
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        netD.zero_grad()
        real = real_images(opt.batch_size, g)
        label = torch.full((opt.batch_size,), real_label)
        errD_real = criterion(netD(real), label)
        errD_real.backward()
        noise = torch.randn(opt.batch_size, NZ, 1, 1)
        fake = netG(noise)
        label.fill_(fake_label)
        errD_fake = criterion(netD(fake.detach()), label)
        errD_fake.backward()
        errD = errD_real + errD_fake
        optimizerD.step()
        # (2) Update G network: minimize log(1 - D(G(z))) (the minimax form)
        netG.zero_grad()
        label.fill_(fake_label)
        errG = -criterion(netD(fake), label)
        errG.backward()
        optimizerG.step()
        iters += 1
        if i % 30 == 0:
            print(f"[{i}/{opt.niter}] Loss_D: {errD.item():.4f} Loss_G: {errG.item():.4f}")
    with torch.no_grad():
        samples = netG(fixed_noise)
    print(f"iterations {iters} sample range [{samples.min():.2f}, {samples.max():.2f}]")


if __name__ == "__main__":
    main()

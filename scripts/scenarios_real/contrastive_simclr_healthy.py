"""Contrastive self-supervised learning in the layout of sthalles/SimCLR, with the learnable temperature of
openai/CLIP / mlfoundations/open_clip: a small conv backbone (conv -> BatchNorm -> ReLU stages, global average
pool) with an MLP projection head; each batch gives two randomly augmented views of the same images, features are
L2-normalised and the InfoNCE loss is cross-entropy over the (2N-1) cosine similarities of each view, scaled by
exp(logit_scale) where logit_scale = nn.Parameter(torch.ones([]) * log(1 / 0.07)) is trained with the network
and clamped to [0, log(100)] under torch.no_grad() after every optimizer step (as open_clip does). Adam lr 1e-3,
weight decay 1e-6, cosine schedule. Afterwards a linear probe (its own Linear layer and optimizer) is trained on
the frozen backbone features to measure what was learned.

Data: 16x16 single-channel images made in code (8 classes of oriented stripe/blob patterns at random phase),
augmentations made in code (random shift, flip, brightness/contrast jitter, additive noise), seeded."""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def make_images(n, seed, size=16):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 8, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(float(size)), torch.arange(float(size)), indexing="ij")
    theta = (labels % 4).float()[:, None, None] * math.pi / 4
    freq = torch.where(labels < 4, 0.6, 1.2)[:, None, None]
    phase = torch.rand(n, 1, 1, generator=g) * 2 * math.pi
    img = torch.sin(freq * (xx * torch.cos(theta) + yy * torch.sin(theta)) + phase)
    return img.unsqueeze(1), labels


def augment(x):
    n = x.shape[0]
    dx, dy = torch.randint(-3, 4, (2,)).tolist()
    x = torch.roll(x, shifts=(dy, dx), dims=(2, 3))
    flip = torch.rand(n, 1, 1, 1) < 0.5
    x = torch.where(flip, x.flip(3), x)
    x = x * (0.6 + 0.8 * torch.rand(n, 1, 1, 1)) + 0.4 * (torch.rand(n, 1, 1, 1) - 0.5)
    return x + 0.3 * torch.randn_like(x)


class Backbone(nn.Module):
    def __init__(self, width=32):
        super().__init__()
        def stage(cin, cout, stride):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout),
                                 nn.ReLU(inplace=True))
        self.features = nn.Sequential(stage(1, width, 1), stage(width, width, 2), stage(width, 2 * width, 2),
                                      stage(2 * width, 2 * width, 1))
        self.out_dim = 2 * width

    def forward(self, x):
        return self.features(x).mean(dim=(2, 3))


class SimCLRModel(nn.Module):
    def __init__(self, proj_dim=32):
        super().__init__()
        self.backbone = Backbone()
        d = self.backbone.out_dim
        self.projector = nn.Sequential(nn.Linear(d, d), nn.ReLU(inplace=True), nn.Linear(d, proj_dim))
        self.logit_scale = nn.Parameter(torch.ones([]) * math.log(1 / 0.07))

    def forward(self, x):
        return self.projector(self.backbone(x))


def info_nce_loss(features, logit_scale, batch_size):
    labels = torch.cat([torch.arange(batch_size) for _ in range(2)], dim=0)
    features = F.normalize(features, dim=1)
    sim = features @ features.T
    mask = torch.eye(labels.shape[0], dtype=torch.bool)
    # the positive of view i is the other view of the same image; a view is never its own negative
    targets = torch.cat([torch.arange(batch_size) + batch_size, torch.arange(batch_size)])
    logits = (logit_scale.exp() * sim).masked_fill(mask, float("-inf"))
    return F.cross_entropy(logits, targets), logits, targets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    torch.manual_seed(0)
    images, labels = make_images(2048, 1)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                         batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = SimCLRModel()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=1e-6)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs * len(loader))
    n_iter = 0
    for epoch in range(args.epochs):
        model.train()
        for x, _ in loader:
            views = torch.cat([augment(x), augment(x)], dim=0)
            features = model(views)
            loss, logits, targets = info_nce_loss(features, model.logit_scale, args.batch_size)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(100))
            if n_iter % 20 == 0:
                top1 = (logits.argmax(dim=1) == targets).float().mean().item()
                print(f"epoch {epoch} iter {n_iter}: loss {loss.item():.4f} top1 {top1:.3f} "
                      f"temperature {1 / model.logit_scale.exp().item():.4f}")
            n_iter += 1

    # linear probe on frozen features
    model.eval()
    with torch.no_grad():
        feats = model.backbone(images)
        test_images, test_labels = make_images(512, 2)
        test_feats = model.backbone(test_images)
    mu, sd = feats.mean(0), feats.std(0) + 1e-6
    probe = nn.Linear(feats.shape[1], 8)
    probe_opt = torch.optim.Adam(probe.parameters(), lr=1e-2)
    for _ in range(100):
        probe_opt.zero_grad()
        probe_loss = F.cross_entropy(probe((feats - mu) / sd), labels)
        probe_loss.backward()
        probe_opt.step()
    acc = (probe((test_feats - mu) / sd).argmax(1) == test_labels).float().mean().item()
    print(f"linear probe: train loss {probe_loss.item():.4f}, test accuracy {acc:.3f}")


if __name__ == "__main__":
    main()

"""Image classification with Mixup + CutMix in the timm train.py layout: timm's Mixup semantics written out
(per batch: with prob 0.5 CutMix (a box pasted from the flipped batch, lambda corrected by the box area), else
Mixup (lambda ~ Beta(0.8, 0.8) blend with the flipped batch); label smoothing 0.1 folded into the soft targets),
SoftTargetCrossEntropy (sum(-target * log_softmax) per sample, mean over the batch), AdamW lr 1e-3 wd 0.05 with
warm-up + cosine, a small ConvNet with BatchNorm and GELU. The training loss stays high by design (soft, mixed
targets); the test accuracy is what improves. Data: 16x16 oriented stripes made in code, seeded."""
import math

import numpy as np
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
    return (img + 0.5 * torch.randn(img.shape, generator=g)).unsqueeze(1), labels


def one_hot(y, classes, on, off):
    return torch.full((y.size(0), classes), off).scatter_(1, y.view(-1, 1), on)


class Mixup:
    def __init__(self, mixup_alpha=0.8, cutmix_alpha=1.0, prob=1.0, switch_prob=0.5, smoothing=0.1, classes=8,
                 seed=0):
        self.mixup_alpha, self.cutmix_alpha, self.prob, self.switch_prob = mixup_alpha, cutmix_alpha, prob, switch_prob
        self.smoothing, self.classes = smoothing, classes
        self.rng = np.random.default_rng(seed)

    def __call__(self, x, y):
        lam, use_cutmix = 1.0, False
        if self.rng.random() < self.prob:
            use_cutmix = self.rng.random() < self.switch_prob
            alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
            lam = float(self.rng.beta(alpha, alpha))
        if use_cutmix:
            h, w = x.shape[-2:]
            cut = math.sqrt(1 - lam)
            ch, cw = int(h * cut), int(w * cut)
            cy, cx = self.rng.integers(h), self.rng.integers(w)
            y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
            x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
            x[:, :, y0:y1, x0:x1] = x.flip(0)[:, :, y0:y1, x0:x1]
            lam = 1 - (y1 - y0) * (x1 - x0) / float(h * w)
        elif lam != 1.0:
            x.mul_(lam).add_(x.flip(0).mul_(1 - lam))
        off = self.smoothing / self.classes
        on = 1 - self.smoothing + off
        y1h = one_hot(y, self.classes, on, off)
        return x, y1h * lam + y1h.flip(0) * (1 - lam)


class SoftTargetCrossEntropy(nn.Module):
    def forward(self, x, target):
        return torch.sum(-target * F.log_softmax(x, dim=-1), dim=-1).mean()


class Net(nn.Module):
    def __init__(self, classes=8):
        super().__init__()
        def stage(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.GELU())
        self.features = nn.Sequential(stage(1, 32), stage(32, 32), nn.MaxPool2d(2), stage(32, 64), nn.MaxPool2d(2),
                                      stage(64, 64))
        self.head = nn.Linear(64, classes)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def main():
    torch.manual_seed(0)
    x, y = make_images(2048, 1)
    xt, yt = make_images(512, 2)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True,
                                         drop_last=True)
    model = Net()
    mixup = Mixup()
    decay = [p for n, p in model.named_parameters() if p.ndim > 1]
    no_decay = [p for n, p in model.named_parameters() if p.ndim <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3)
    epochs, warmup = 5, 20
    total = epochs * len(loader)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    crit = SoftTargetCrossEntropy()
    step = 0
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            xb, yb = mixup(xb.clone(), yb)
            loss = crit(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % 32 == 0:
                print(f"step {step} loss {loss.item():.4f}")
        model.eval()
        with torch.no_grad():
            acc = (model(xt).argmax(1) == yt).float().mean().item()
        print(f"epoch {epoch}: test accuracy {acc:.3f}")
    print(f"optimizer steps {step}")


if __name__ == "__main__":
    main()

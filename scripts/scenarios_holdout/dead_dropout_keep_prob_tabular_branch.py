"""Two-input model: small CNN on an image + MLP on tabular metadata, fused head.

Bug: the model was ported from TensorFlow 1, where dropout takes
`keep_prob`. The config value `keep_prob=1.0` ("no dropout") was passed
straight to nn.Dropout(p=...), where p is the probability to DROP. With
p=1.0 the tabular branch's dropout zeroes every activation in training
mode: its output is all zeros, the tabular Linear before it gets no
gradient, and the fused head can only use the image branch. The loss
still goes down (images carry part of the signal), which hides the bug.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIG = {"img_channels": 8, "tab_hidden": 32, "keep_prob": 1.0, "n_classes": 3}


class ImageBranch(nn.Module):
    def __init__(self, ch):
        super().__init__()
        self.conv1 = nn.Conv2d(1, ch, 3, padding=1)
        self.conv2 = nn.Conv2d(ch, 2 * ch, 3, padding=1)

    def forward(self, img):
        h = F.max_pool2d(F.relu(self.conv1(img)), 2)
        h = F.relu(self.conv2(h))
        return F.adaptive_avg_pool2d(h, 1).flatten(1)


class FusionNet(nn.Module):
    def __init__(self, cfg, tab_dim=10):
        super().__init__()
        self.image = ImageBranch(cfg["img_channels"])
        self.tabular = nn.Sequential(
            nn.Linear(tab_dim, cfg["tab_hidden"]),
            nn.ReLU(),
            nn.Dropout(p=cfg["keep_prob"]),
        )
        self.head = nn.Linear(2 * cfg["img_channels"] + cfg["tab_hidden"], cfg["n_classes"])

    def forward(self, img, tab):
        return self.head(torch.cat([self.image(img), self.tabular(tab)], dim=1))


def make_data(n=1024, size=12, tab_dim=10, n_classes=3):
    y = torch.randint(0, n_classes, (n,))
    img_templates = torch.randn(n_classes, 1, size, size)
    img = 0.6 * img_templates[y] + torch.randn(n, 1, size, size)  # weak image signal
    tab_w = torch.randn(n_classes, tab_dim)
    tab = 1.5 * tab_w[y] + torch.randn(n, tab_dim)  # strong tabular signal
    return img, tab, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    img, tab, y = make_data()
    model = FusionNet(CONFIG)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, y.shape[0], (args.batch_size,))
        loss = F.cross_entropy(model(img[idx], tab[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 15 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

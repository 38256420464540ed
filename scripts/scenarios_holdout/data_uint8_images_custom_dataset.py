"""Digit-like glyph classifier: custom Dataset -> DataLoader -> small GELU CNN.

Bug: the Dataset stores the images as uint8 (0-255) to save memory and
`__getitem__` returns `img.float()`, but the `/ 255` (or Normalize) step
was lost in a refactor. The network sees inputs in [0, 255] instead of
[0, 1]: activations and logits are ~100x too large (first loss ~15), the
first SGD step overshoots (loss ~1.4e3, gradient norm ~4e3), conv1 is
pushed into GELU's flat negative region (all its outputs ~0 by step
~10), and the loss thrashes between ~10 and ~150 instead of converging.
The same script with `/ 255` reaches ~1.0.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class GlyphDataset(Dataset):
    def __init__(self, n=2000, size=16, n_classes=6, seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = (torch.rand(n_classes, size, size, generator=g) > 0.6).float()
        self.labels = torch.randint(0, n_classes, (n,), generator=g)
        noisy = protos[self.labels] * 200 + 40 * torch.rand(n, size, size, generator=g)
        self.images = noisy.clamp(0, 255).to(torch.uint8)  # stored as bytes

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        img = self.images[i].unsqueeze(0).float()  # BUG: missing / 255.0
        return img, self.labels[i]


class GlyphNet(nn.Module):
    def __init__(self, n_classes=6):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc = nn.Linear(32 * 4 * 4, n_classes)

    def forward(self, x):
        x = F.max_pool2d(F.gelu(self.conv1(x)), 2)
        x = F.max_pool2d(F.gelu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(GlyphDataset(), batch_size=args.batch_size, shuffle=True)
    model = GlyphNet()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    step = 0
    while step < args.steps:
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 10 == 0:
                print(f"step {step:3d} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

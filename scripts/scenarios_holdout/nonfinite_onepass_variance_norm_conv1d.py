"""1-D CNN on raw temperature-probe windows, with a hand-written "fast" norm layer.

Bug: the custom normalisation computes the per-window variance in one pass
as E[x^2] - E[x]^2 (to save a kernel launch). The probe readings are
absolute temperatures around 300 K with fluctuations of ~0.1 K, so in
float32 E[x^2] ~ 9e4 carries an absolute rounding error (~1e-2) as large
as the true variance (2e-4 to 5e-3): for some windows the computed variance is
negative, sqrt(var + eps) is NaN and the norm layer's output is NaN from
the very first batch. (torch.var / nn.LayerNorm subtract the mean first
and are fine.)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class FastInstanceNorm(nn.Module):
    def __init__(self, eps=1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):  # x: (B, C, T)
        mean = x.mean(dim=-1, keepdim=True)
        var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(var + self.eps)


class ProbeNet(nn.Module):
    def __init__(self, channels=3, n_classes=3):
        super().__init__()
        self.norm = FastInstanceNorm()
        self.conv1 = nn.Conv1d(channels, 16, 5, padding=2)
        self.conv2 = nn.Conv1d(16, 16, 5, padding=2)
        self.fc = nn.Linear(16, n_classes)

    def forward(self, x):
        x = self.norm(x)
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        return self.fc(x.mean(dim=-1))


def make_windows(n=1024, channels=3, length=64, n_classes=3):
    y = torch.randint(0, n_classes, (n,))
    t = torch.arange(length).float()
    pattern = torch.stack([torch.zeros(length), torch.sin(0.3 * t), torch.sign(torch.sin(0.15 * t))])
    base = 295.0 + 10.0 * torch.rand(n, channels, 1)  # absolute temperature in kelvin
    x = base + 0.05 * (2.0 * pattern[y][:, None, :] + 0.3 * torch.randn(n, channels, length))
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_windows()
    model = ProbeNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

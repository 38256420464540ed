"""Control: wide, very sparse ReLU feature layer (sparse-coding style) + linear classifier.

The 512-unit feature layer has its bias initialised to a threshold of
-2.6 and is trained with a small L1 activity penalty, so only ~10% of its
ReLU outputs are non-zero at any time (~88-92% exact zeros). That is the
intended sparse code, not dying units: every unit fires for some of the
training inputs (the rarest for ~0.15% of them, so in a single batch of
64 some units can be silent); gradients flow through the active ones,
and the loss falls steadily (2.1 -> ~0.1).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SparseFeatureNet(nn.Module):
    def __init__(self, in_dim=32, width=512, n_classes=8, threshold=-2.6):
        super().__init__()
        self.features = nn.Linear(in_dim, width)
        self.classifier = nn.Linear(width, n_classes)
        with torch.no_grad():
            self.features.weight.normal_(0.0, 1.5 / in_dim ** 0.5)
            self.features.bias.fill_(threshold)

    def forward(self, x):
        code = F.relu(self.features(x))
        return self.classifier(code), code


def make_data(n=4096, in_dim=32, n_classes=8):
    centers = torch.randn(n_classes, in_dim)
    y = torch.randint(0, n_classes, (n,))
    x = centers[y] + 0.8 * torch.randn(n, in_dim)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--l1", type=float, default=1e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    model = SparseFeatureNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        logits, code = model(x[idx])
        loss = F.cross_entropy(logits, y[idx]) + args.l1 * code.abs().sum(dim=1).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            sparsity = (code == 0).float().mean().item()
            print(f"step {step:3d} loss {loss.item():.4f} zero fraction {sparsity:.2f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

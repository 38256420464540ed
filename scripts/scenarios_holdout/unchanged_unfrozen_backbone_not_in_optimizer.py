"""Two-phase fine-tuning of a CNN: head only first, then the whole network.

Bug: the optimizer is built once, at the start, from
`filter(lambda p: p.requires_grad, model.parameters())` while the
backbone is frozen. At step 25 the schedule unfreezes the backbone
(requires_grad=True) but never adds its parameters to the optimizer
(no `add_param_group`, no rebuild). From then on the backbone receives
gradients on every step but its weights never change: phase 2 silently
trains the head alone. (Before step 25 the backbone is frozen on purpose.
Side effect: optimizer.zero_grad() never clears the backbone's .grad, so
it accumulates and its norm grows ~70x by the end.)
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, n_classes))

    def forward(self, x):
        return self.head(self.backbone(x))


def set_trainable(module, flag):
    for p in module.parameters():
        p.requires_grad_(flag)


def make_data(n=1024, size=12, n_classes=4):
    y = torch.randint(0, n_classes, (n,))
    colours = torch.randn(n_classes, 3, 1, 1)
    stripes = torch.sin(torch.arange(size).float() * (0.5 + 0.4 * torch.arange(n_classes).float())[:, None])
    x = colours[y] * stripes[y][:, None, None, :] + 0.8 * torch.randn(n, 3, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=70)
    parser.add_argument("--unfreeze-at", type=int, default=25)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    model = SmallCNN()
    set_trainable(model.backbone, False)
    optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, model.parameters()), lr=args.lr)

    for step in range(args.steps):
        if step == args.unfreeze_at:
            set_trainable(model.backbone, True)
            print(f"step {step:3d} unfreezing backbone")
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

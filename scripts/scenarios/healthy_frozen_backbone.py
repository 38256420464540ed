"""Control: transfer learning with an intentionally frozen backbone.

The backbone's parameters have requires_grad=False (their .grad stays None
and they never change) and only the head is optimised. This is deliberate,
not a bug.
"""
import argparse

import torch
import torch.nn as nn


class FineTuneNet(nn.Module):
    def __init__(self, in_dim=32, hidden=64, n_classes=4):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.head = nn.Linear(hidden, n_classes)

    def forward(self, x):
        return self.head(self.backbone(x))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = FineTuneNet()
    # "pretrained" backbone: freeze it and train only the head
    for p in model.backbone.parameters():
        p.requires_grad = False
    model.backbone.eval()

    x = torch.randn(2048, 32)
    with torch.no_grad():
        feats = model.backbone(x)
    y = (feats @ torch.randn(64, 4)).argmax(dim=1)  # linearly separable in feature space

    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""Demo: a healthy ReLU MLP trained with Adam, with a validation pass under torch.no_grad().

    neuraldbg run --fail-on any scripts/demo_healthy.py   # exits 0, status healthy
"""
import argparse

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(20, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                 nn.Linear(width, 2))

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = (x[:, 0] + x[:, 1] ** 2 > 1).long()
    x_val, y_val = x[:256], y[:256]
    model = MLP(args.width)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        model.train()
        idx = torch.randint(256, len(x), (64,))
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step % 50 == 0:
            model.eval()
            with torch.no_grad():
                acc = (model(x_val).argmax(1) == y_val).float().mean().item()
            print(f"step {step} loss {loss.item():.4f} val acc {acc:.3f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

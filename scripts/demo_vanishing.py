"""Demo: a deep sigmoid MLP whose gradients vanish toward the input (plain PyTorch, no neuraldbg import).

    neuraldbg run --fail-on vanishing_gradient scripts/demo_vanishing.py   # exits 3
"""
import argparse

import torch
import torch.nn as nn


class DeepSigmoidMLP(nn.Module):
    def __init__(self, depth: int, width: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(20 if i == 0 else width, width) for i in range(depth))
        self.act = nn.Sigmoid()
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--width", type=int, default=64)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--lr", type=float, default=0.05)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(512, 20)
    y = (x[:, 0] * x[:, 1] > 0).long()
    model = DeepSigmoidMLP(args.depth, args.width)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        idx = torch.randint(0, len(x), (64,))
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        if step % 20 == 0:
            print(f"step {step} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

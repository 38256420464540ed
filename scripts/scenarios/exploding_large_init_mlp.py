"""Deep ReLU regression MLP with a 'boosted' custom init.

Bug: every Linear weight is multiplied by init_scale=2.7 after the default
init (someone tried to "speed up" learning). Per-layer gain is >1, so after
8 layers activations and gradients are far too large; plain SGD without
clipping then makes the gradient norm grow by orders of magnitude per step
(57 -> 1e3 -> 1e4 -> 1e9) until everything is inf/NaN.
"""
import argparse

import torch
import torch.nn as nn


class DeepRegressor(nn.Module):
    def __init__(self, in_dim=16, hidden=64, depth=8, init_scale=2.7):
        super().__init__()
        self.layers = nn.ModuleList()
        dim = in_dim
        for _ in range(depth):
            self.layers.append(nn.Sequential(nn.Linear(dim, hidden), nn.ReLU()))
            dim = hidden
        self.out = nn.Linear(hidden, 1)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.mul_(init_scale)

    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return self.out(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 16)
    y = torch.sin(x[:, :1]) + 0.5 * x[:, 1:2]
    model = DeepRegressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:4d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

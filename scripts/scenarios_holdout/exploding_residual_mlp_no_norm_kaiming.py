"""Deep residual MLP regressor with no normalisation layers.

Bug: each residual block adds `fc2(relu(fc1(x)))` back onto x, and both
Linear layers are re-initialised with kaiming_normal_ (gain sqrt(2)),
"because ReLU". With no LayerNorm and no down-scaling of the residual
branch, every block roughly triples the activation variance, so after 8
blocks the initial loss is ~4e3 and the gradients ~1e4-1e5. The first SGD
step is enormous, the next gradient is ~1e11 and the run is NaN by step 2.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualBlock(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim)
        self.fc2 = nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.fc2(F.relu(self.fc1(x)))


class ResMLP(nn.Module):
    def __init__(self, in_dim=16, dim=64, n_blocks=8):
        super().__init__()
        self.stem = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList([ResidualBlock(dim) for _ in range(n_blocks)])
        self.head = nn.Linear(dim, 1)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(4096, 16)
    y = (torch.sin(x[:, :4]).sum(dim=1) + 0.3 * x[:, 4] * x[:, 5]).unsqueeze(1)
    model = ResMLP()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        pred = model(x[idx])
        loss = F.mse_loss(pred, y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            print(f"step {step:3d} loss {loss.item():.4g}")
    print(f"final loss {loss.item():.4g}")


if __name__ == "__main__":
    main()

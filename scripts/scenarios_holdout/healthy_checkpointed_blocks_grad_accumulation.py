"""Control: residual MLP whose blocks run under torch.utils.checkpoint, with gradient accumulation.

Each block's forward is wrapped in checkpoint(..., use_reentrant=False),
so its activations are recomputed during backward (each block's forward
runs twice per micro-batch). The loop accumulates gradients over 3
micro-batches (loss divided by 3) before each AdamW step and zero_grad,
and clips the accumulated gradient. 40 optimizer steps = 120 backward
passes. The loss falls steadily (~1.6 -> ~0.7).
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class CheckpointedResMLP(nn.Module):
    def __init__(self, in_dim=16, dim=48, depth=3, n_classes=5):
        super().__init__()
        self.inp = nn.Linear(in_dim, dim)
        self.blocks = nn.ModuleList([Block(dim) for _ in range(depth)])
        self.out = nn.Linear(dim, n_classes)

    def forward(self, x):
        x = self.inp(x)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False)
        return self.out(x)


def make_data(n=4096, in_dim=16, n_classes=5):
    x = torch.randn(n, in_dim)
    logits = torch.stack([torch.sin(x[:, 0] * (k + 1)) + x[:, k + 1] for k in range(n_classes)], dim=1)
    return x, logits.argmax(dim=1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--accum", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    model = CheckpointedResMLP()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)

    for step in range(args.steps):
        total = 0.0
        for _ in range(args.accum):
            idx = torch.randint(0, x.shape[0], (args.micro_batch,))
            loss = F.cross_entropy(model(x[idx]), y[idx]) / args.accum
            loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step:3d} loss {total:.4f}")
    print(f"final loss {total:.4f}")


if __name__ == "__main__":
    main()

"""Fine-tuning layout: phase 1 pre-trains a model and saves a checkpoint (state_dict + optimizer state) to a
temporary directory; phase 2 builds a new model, loads that checkpoint and fine-tunes it at a 10x lower learning
rate on more data from the same task.

Phase 2's loss starts near its floor (the noise level of the targets) and stays there: nothing is left to learn,
which is what a converged checkpoint looks like, not a plateau to fix."""
import argparse
import os
import tempfile

import torch
import torch.nn as nn
import torch.nn.functional as F


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.out = nn.Linear(64, 1)

    def forward(self, x):
        return self.out(self.body(x))


def task(n, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    w = torch.randn(8, 1, generator=torch.Generator().manual_seed(3))
    return x, (x @ w).relu() * 0.5 + 0.05 * torch.randn(n, 1, generator=g)


def train(model, opt, x, y, steps, g, tag):
    for step in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=g)
        loss = F.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"{tag} step {step} loss {loss.item():.5f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pretrain-steps", type=int, default=300)
    ap.add_argument("--finetune-steps", type=int, default=200)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    with tempfile.TemporaryDirectory() as ckpt_dir:
        path = os.path.join(ckpt_dir, "checkpoint.pt")
        model = Regressor()
        opt = torch.optim.Adam(model.parameters(), lr=args.lr)
        x, y = task(4096, 1)
        train(model, opt, x, y, args.pretrain_steps, g, "pretrain")
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, path)
        del model, opt

        ckpt = torch.load(path)
        model = Regressor()
        model.load_state_dict(ckpt["model"])
        opt = torch.optim.Adam(model.parameters(), lr=args.lr / 10)
        x2, y2 = task(4096, 2)
        train(model, opt, x2, y2, args.finetune_steps, g, "finetune")
    print(f"optimizer steps {args.pretrain_steps + args.finetune_steps}")


if __name__ == "__main__":
    main()

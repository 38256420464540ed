"""Regression MLP trained with gradient accumulation inside a Trainer class.

Bug: the accumulation loop calls `optimizer.zero_grad()` once, before the
first micro-batch, and never again after `optimizer.step()`. Every .grad
therefore holds the running sum of ALL past micro-batch gradients. The
update keeps pushing in stale directions (like momentum with beta=1), so the
loss swings up and down instead of settling (e.g. 0.5 -> 24 -> 38 -> 7 ->
23 between updates 27 and 66), and the stored gradient norm grows ~40x.
With zero_grad() after each step the same run converges to ~0.2.
"""
import argparse

import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model, lr, accum_steps):
        self.model = model
        self.accum_steps = accum_steps
        self.optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        self.loss_fn = nn.MSELoss()

    def run(self, x, y, n_updates, micro_batch):
        self.optimizer.zero_grad()
        losses = []
        for update in range(n_updates):
            total = 0.0
            for _ in range(self.accum_steps):
                idx = torch.randint(0, x.shape[0], (micro_batch,))
                loss = self.loss_fn(self.model(x[idx]), y[idx]) / self.accum_steps
                loss.backward()
                total += loss.item()
            self.optimizer.step()
            losses.append(total)
            if update % 10 == 0:
                print(f"update {update:3d} loss {total:.4f}")
        return losses


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--updates", type=int, default=80)
    parser.add_argument("--accum-steps", type=int, default=2)
    parser.add_argument("--micro-batch", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 8)
    y = (x[:, :4] @ torch.tensor([1.0, -2.0, 0.5, 1.5])).unsqueeze(1) + 0.1 * torch.randn(2048, 1)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1))
    losses = Trainer(model, args.lr, args.accum_steps).run(x, y, args.updates, args.micro_batch)
    print(f"final loss {losses[-1]:.4f}")


if __name__ == "__main__":
    main()

"""Control: MLP classifier with linear LR warm-up then cosine decay (LambdaLR)."""
import argparse
import math

import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, in_dim=8, hidden=64, n_classes=4):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(in_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, n_classes))

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--warmup-steps", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 8)
    y = (x @ torch.randn(8, 4)).argmax(dim=1)
    model = Classifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=1e-4)

    def lr_lambda(step):
        if step < args.warmup_steps:
            return (step + 1) / args.warmup_steps
        progress = (step - args.warmup_steps) / max(1, args.steps - args.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.5f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

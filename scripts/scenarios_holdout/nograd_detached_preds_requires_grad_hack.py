"""Probability-calibration regressor (targets in [0, 1]) with AdamW + cosine schedule.

Bug: predictions are post-processed with
    preds = model(x).detach().clamp(0.0, 1.0)
(the `.detach()` came from the metrics code). backward() then raised
"element 0 of tensors does not require grad and does not have a grad_fn",
which was "fixed" with `loss.requires_grad_(True)` - a recipe often found
on forums. The loss is now a leaf: backward() runs without error, but no
parameter of the model ever receives a gradient, AdamW skips every
parameter, and the loss never moves except through batch noise.
"""
import argparse

import torch
import torch.nn as nn


def build_model(in_dim=16, hidden=64):
    return nn.Sequential(
        nn.Linear(in_dim, hidden), nn.LayerNorm(hidden), nn.GELU(),
        nn.Linear(hidden, hidden), nn.GELU(),
        nn.Linear(hidden, 1), nn.Sigmoid(),
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(4096, 16)
    y = torch.sigmoid(x[:, :3].sum(dim=1, keepdim=True) - 0.5 * x[:, 3:4])
    model = build_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.steps)
    criterion = nn.BCELoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        preds = model(x[idx]).detach().clamp(0.0, 1.0)
        loss = criterion(preds, y[idx])
        loss.requires_grad_(True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""Plain gradient-accumulation loop: each micro-batch loss is divided by the number of accumulation steps and
backpropagated; the optimizer steps (and the gradients are zeroed) every 4 micro-batches, with gradient
clipping before the step and a cosine schedule after it.

Data: a synthetic 5-class problem (a fixed random MLP labels Gaussian inputs); the model is an MLP with
LayerNorm. 240 micro-batches = 60 optimizer steps; the script counts its own optimizer steps."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--accum-steps", type=int, default=4)
    ap.add_argument("--micro-batches", type=int, default=240)
    ap.add_argument("--micro-batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()
    torch.manual_seed(0)
    labeller = nn.Sequential(nn.Linear(20, 32), nn.Tanh(), nn.Linear(32, 5))
    x_all = torch.randn(4000, 20)
    with torch.no_grad():
        y_all = labeller(x_all).argmax(1)
    model = nn.Sequential(nn.Linear(20, 64), nn.LayerNorm(64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                          nn.Linear(64, 5))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    total = args.micro_batches // args.accum_steps
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
    g = torch.Generator().manual_seed(1)
    optimizer_steps, running = 0, 0.0
    optimizer.zero_grad()
    for i in range(args.micro_batches):
        idx = torch.randint(0, len(x_all), (args.micro_batch_size,), generator=g)
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx]) / args.accum_steps
        loss.backward()
        running += loss.item()
        if (i + 1) % args.accum_steps == 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
            optimizer_steps += 1
            if optimizer_steps % 10 == 0:
                print(f"optimizer step {optimizer_steps} loss {running:.4f}")
            running = 0.0
    print(f"optimizer steps {optimizer_steps}")


if __name__ == "__main__":
    main()

"""Gradient accumulation in the Hugging Face example layout: each micro-batch's loss divided by the accumulation
steps and backpropagated, the optimizer (AdamW, linear warm-up) stepped and the gradients zeroed every
`--accum` micro-batches: several backward passes per step, zeroed after the step (healthy). `--zero none` drops
the optimizer.zero_grad() (the bug: every step applies the sum of all micro-batches so far)."""
import argparse

import torch
import torch.nn as nn

parser = argparse.ArgumentParser()
parser.add_argument("--zero", default="after_step", choices=["after_step", "none"])
parser.add_argument("--accum", type=int, default=4)
parser.add_argument("--steps", type=int, default=60)
args = parser.parse_args()

torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
x = torch.randn(2048, 16, generator=g)
y = (x @ torch.randn(16, 3, generator=g)).argmax(1)
model = nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 3))
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
warmup = 5
scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
loss_fn = nn.CrossEntropyLoss()
model.train()
micro = 16
for step in range(args.steps * args.accum):
    idx = torch.randint(0, len(x), (micro,), generator=g)
    outputs = model(x[idx])
    loss = loss_fn(outputs, y[idx]) / args.accum
    loss.backward()
    if (step + 1) % args.accum == 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if args.zero == "after_step":
            optimizer.zero_grad()
        if (step + 1) // args.accum % 20 == 0:
            print(f"step {(step + 1) // args.accum}: loss {loss.item() * args.accum:.4f}")

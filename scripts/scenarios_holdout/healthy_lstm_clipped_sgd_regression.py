"""Control: 2-layer LSTM that tracks a hidden drift in a noisy sequence, SGD + gradient clipping.

The training loop clips the global gradient norm to 0.25 before every
step (the usual recipe for recurrent nets, as in the PyTorch word
language model example). The raw gradient norm is above the limit on
~58 of the 80 steps, so clipping is active most of the time - that is
what it is for. The loss falls from ~1 to ~0.06, close to the level the
observation noise allows.
"""
import argparse

import torch
import torch.nn as nn


class DriftTracker(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.lstm = nn.LSTM(2, hidden, num_layers=2, batch_first=True)
        self.readout = nn.Linear(hidden, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.readout(out).squeeze(-1)  # per-step estimate


def make_batch(batch, length=30):
    steps = 0.25 * torch.randn(batch, length)
    drift = steps.cumsum(dim=1)
    obs = drift + 0.3 * torch.randn(batch, length)
    control = torch.sign(torch.randn(batch, length))
    x = torch.stack([obs, control], dim=-1)
    return x, drift


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--clip", type=float, default=0.25)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = DriftTracker()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    criterion = nn.MSELoss()
    clipped = 0

    for step in range(args.steps):
        x, target = make_batch(args.batch_size)
        loss = criterion(model(x), target)
        optimizer.zero_grad()
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        clipped += int(total_norm > args.clip)
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f} grad norm {total_norm:.2f}")
    print(f"final loss {loss.item():.4f} (clipped on {clipped}/{args.steps} steps)")


if __name__ == "__main__":
    main()

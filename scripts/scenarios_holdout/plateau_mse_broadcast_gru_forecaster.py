"""GRU next-value forecaster for a noisy oscillator.

Bug: the model returns predictions of shape (B, 1) while the targets are
(B,). nn.MSELoss broadcasts the pair to (B, B) (PyTorch only emits a
UserWarning), so every prediction is compared with every target in the
batch. The minimiser of that loss is the batch mean of the targets for
every input, so the GRU learns to output a constant and the loss sits at
the target variance (~1) for the whole run, while the same model with
matching shapes reaches ~0.02.
"""
import argparse
import warnings

import torch
import torch.nn as nn


class Forecaster(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.gru = nn.GRU(1, hidden, batch_first=True)
        self.proj = nn.Linear(hidden, 1)

    def forward(self, seq):
        out, _ = self.gru(seq)
        return self.proj(out[:, -1])  # (B, 1)


def make_series(n=2048, length=20):
    t0 = torch.rand(n, 1) * 50
    freq = 0.3 + 0.2 * torch.rand(n, 1)
    t = t0 + torch.arange(length + 1).float()
    series = 1.4 * torch.sin(freq * t) + 0.1 * torch.randn(n, length + 1)
    return series[:, :-1, None], series[:, -1]  # (n, T, 1), (n,)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    warnings.filterwarnings("ignore", message="Using a target size")
    torch.manual_seed(0)
    seqs, targets = make_series()
    model = Forecaster()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.MSELoss()

    for step in range(args.steps):
        idx = torch.randint(0, seqs.shape[0], (args.batch_size,))
        pred = model(seqs[idx])
        loss = criterion(pred, targets[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

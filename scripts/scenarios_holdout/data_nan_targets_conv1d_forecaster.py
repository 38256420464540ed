"""Multi-step load forecaster: 1-D CNN over the last 48 readings, DataLoader pipeline.

Bug: the target series came from a meter export in which a few
readings are missing and were parsed as NaN. The inputs were
forward-filled, but the forecast targets were built from the raw column,
so 8 of the ~5900 target windows contain a NaN. The first shuffled batch
that includes one gives a NaN MSE, NaN gradients, and NaN weights from
then on. Nothing in the model is wrong.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def build_dataset(n_points=6000, window=48, horizon=4, n_missing=2):
    t = torch.arange(n_points).float()
    load = 10 + 3 * torch.sin(2 * torch.pi * t / 24) + 1.5 * torch.sin(2 * torch.pi * t / 168) + 0.3 * torch.randn(n_points)
    raw = load.clone()
    missing = torch.randperm(n_points - 1)[:n_missing] + 1
    raw[missing] = float("nan")
    filled = raw.clone()
    for i in sorted(missing.tolist()):  # forward-fill the inputs only
        filled[i] = filled[i - 1]
    n_windows = n_points - window - horizon
    x = filled.unfold(0, window, 1)[:n_windows]
    y = raw[window:].unfold(0, horizon, 1)[:n_windows]
    mean, std = 10.0, 3.5
    return TensorDataset(((x - mean) / std).unsqueeze(1), (y - mean) / std)


class ConvForecaster(nn.Module):
    def __init__(self, horizon=4):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(1, 16, 5, padding=2), nn.GELU(),
            nn.Conv1d(16, 16, 5, stride=2, padding=2), nn.GELU(),
            nn.Conv1d(16, 16, 5, stride=2, padding=2), nn.GELU(),
        )
        self.head = nn.Linear(16 * 12, horizon)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--loader-seed", type=int, default=5)
    args = parser.parse_args()

    torch.manual_seed(0)
    loader = DataLoader(build_dataset(), batch_size=args.batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(args.loader_seed))
    model = ConvForecaster()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    loss_fn = nn.MSELoss()

    step = 0
    while step < args.steps:
        for xb, yb in loader:
            pred = model(xb)
            loss = loss_fn(pred, yb)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 20 == 0:
                print(f"step {step:3d} loss {loss.item():.4f}")
            step += 1
            if step >= args.steps:
                break
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

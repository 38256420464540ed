"""Control: float16 autocast on CPU with a GradScaler whose init_scale is huge.

The first few backward passes overflow in fp16 (inf gradients), GradScaler
skips those optimizer steps and halves the scale until it fits -- this is
the normal, expected AMP warm-up behaviour, not a training failure. After
that the loss decreases normally.
"""
import argparse

import torch
import torch.nn as nn


class MLP(nn.Module):
    def __init__(self, in_dim=32, hidden=64, n_classes=4):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.fc3(self.act(self.fc2(self.act(self.fc1(x)))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--init-scale", type=float, default=2.0 ** 24)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(2048, 32)
    y = (x @ torch.randn(32, 4)).argmax(dim=1)
    model = MLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler("cpu", init_scale=args.init_scale)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = criterion(model(x[idx]), y[idx])
        scaler.scale(loss).backward()
        scaler.step(optimizer)  # skipped internally when grads contain inf
        scaler.update()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f} scale {scaler.get_scale():.0f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

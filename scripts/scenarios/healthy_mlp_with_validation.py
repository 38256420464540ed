"""Control: MLP with dropout, periodic validation under model.eval() + no_grad.

The validation forward passes produce losses that are never backpropagated;
a debugger must not confuse them with training steps.
"""
import argparse

import torch
import torch.nn as nn


class DropoutMLP(nn.Module):
    def __init__(self, in_dim=16, hidden=64, n_classes=3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, hidden), nn.ReLU(), nn.Dropout(0.2),
            nn.Linear(hidden, n_classes),
        )

    def forward(self, x):
        return self.net(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--val-every", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    teacher = torch.randn(16, 3)
    x_train = torch.randn(2048, 16)
    y_train = (x_train @ teacher).argmax(dim=1)
    x_val = torch.randn(256, 16)
    y_val = (x_val @ teacher).argmax(dim=1)

    model = DropoutMLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        model.train()
        idx = torch.randint(0, x_train.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x_train[idx]), y_train[idx])
        loss.backward()
        optimizer.step()
        if (step + 1) % args.val_every == 0:
            model.eval()
            with torch.no_grad():
                logits = model(x_val)
                val_loss = criterion(logits, y_val)
                acc = (logits.argmax(dim=1) == y_val).float().mean()
            print(f"step {step:4d} train {loss.item():.4f} val {val_loss.item():.4f} acc {acc.item():.3f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

"""LSTM sequence classifier whose labels were shuffled separately from inputs.

Bug: the dataset is shuffled with two different permutations,
`x = x[torch.randperm(n)]` and `y = y[torch.randperm(n)]`, so inputs and
labels no longer correspond. There is nothing to learn: the loss stays at
log(3) ~ 1.10 for the whole run even though gradients flow normally.
"""
import argparse

import torch
import torch.nn as nn


class SeqLSTM(nn.Module):
    def __init__(self, n_features=6, hidden=32, n_classes=3):
        super().__init__()
        self.lstm = nn.LSTM(n_features, hidden, batch_first=True)
        self.fc = nn.Linear(hidden, n_classes)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=10)
    args = parser.parse_args()

    torch.manual_seed(0)
    n = 4096
    x = torch.randn(n, args.seq_len, 6)
    y = x[:, :, :3].mean(dim=1).argmax(dim=1)
    # "shuffle the dataset" -- with two independent permutations
    x = x[torch.randperm(n)]
    y = y[torch.randperm(n)]

    model = SeqLSTM()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.arange(step * args.batch_size, (step + 1) * args.batch_size) % n
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

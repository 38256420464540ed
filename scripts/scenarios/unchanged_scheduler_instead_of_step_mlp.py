"""MLP classifier whose loop calls scheduler.step() but never optimizer.step().

Bug: during a refactor `optimizer.step()` was replaced by
`scheduler.step()` (the two look alike). Gradients are computed every
iteration and then thrown away by zero_grad(); no parameter ever changes
and the loss only fluctuates with the batch.
"""
import argparse

import torch
import torch.nn as nn


class Classifier(nn.Module):
    def __init__(self, in_dim=24, hidden=64, n_classes=5):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return self.fc3(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(1024, 24)
    y = (x @ torch.randn(24, 5)).argmax(dim=1)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.5)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f} lr {scheduler.get_last_lr()[0]:.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

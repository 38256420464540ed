"""MLP classifier using F.relu, trained with Adam at lr=0.05.

Modelled on the PyTorch forum thread "Cross Entropy loss is not
decreasing": the loss sits at log(C) and, on inspection, the hidden
parameters have been pushed negative and their gradients are all zero.
Bug: the learning rate is far too high for Adam; the first few updates
push the hidden biases/weights so far negative that the ReLU units after
fc1/fc2 die and never come back.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, in_dim=32, hidden=128, n_classes=10):
        super().__init__()
        self.fc1 = nn.Linear(in_dim, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, n_classes)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    torch.manual_seed(0)
    # features are non-negative (e.g. normalised pixel intensities / counts)
    x = torch.rand(2048, 32)
    y = (x @ torch.randn(32, 10)).argmax(dim=1)
    model = MLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = nn.CrossEntropyLoss()

    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        optimizer.zero_grad()
        loss = criterion(model(x[idx]), y[idx])
        loss.backward()
        optimizer.step()
        if step % 20 == 0:
            print(f"step {step:4d} loss {loss.item():.4f}")
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

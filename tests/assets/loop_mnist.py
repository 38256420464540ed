"""A pytorch/examples MNIST-style loop (train(args, model, device, train_loader, optimizer, epoch)) on synthetic
12x12 digits: a small CNN, SGD with momentum. `--zero` says how the gradients are zeroed between steps:
none (the bug: each step applies the sum of every gradient so far), zero_grad (optimizer.zero_grad() before the
backward), keep_zeros (zero_grad(set_to_none=False)), grad_none (`p.grad = None`), data_zero
(`p.grad.data.zero_()`, which the version counter does not show), model (model.zero_grad() after the step),
before_step (the bug: optimizer.zero_grad() between loss.backward() and optimizer.step()). `--clip` before (as
it should) or after (the bug) optimizer.step(); `--lr 2` with `--zero zero_grad` makes the steps blow up."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.fc1 = nn.Linear(16 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def digits(n, seed):
    """Four classes of 12x12 images: a bright bar in one quadrant, on noise."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = 0.3 * torch.randn(n, 1, 12, 12, generator=g)
    for c in range(4):
        r, q = divmod(c, 2)
        x[y == c, :, 6 * r + 2 : 6 * r + 4, 6 * q : 6 * q + 6] += 1.0
    return x, y


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        if args.zero == "zero_grad":
            optimizer.zero_grad()
        elif args.zero == "keep_zeros":
            optimizer.zero_grad(set_to_none=False)
        elif args.zero == "grad_none":
            for p in model.parameters():
                p.grad = None
        elif args.zero == "data_zero":
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.data.zero_()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        if args.zero == "before_step":  # the bug: the gradients just made are gone before the step reads them
            optimizer.zero_grad()
        if args.clip == "before":
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        optimizer.step()
        if args.clip == "after":  # the bug: the step has applied the unclipped gradients already
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_norm)
        if args.zero == "model":
            model.zero_grad()
        if batch_idx % 10 == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]\tLoss: {loss.item():.6f}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--zero", default="none",
                        choices=["none", "zero_grad", "keep_zeros", "grad_none", "data_zero", "model", "before_step"])
    parser.add_argument("--clip", default="none", choices=["none", "before", "after"])
    parser.add_argument("--max-norm", type=float, default=0.5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    args = parser.parse_args()
    torch.manual_seed(1)
    device = torch.device("cpu")
    x, y = digits(640, seed=0)
    train_loader = DataLoader(TensorDataset(x, y), batch_size=32, shuffle=True,
                              generator=torch.Generator().manual_seed(0))
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.5)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)


if __name__ == "__main__":
    main()

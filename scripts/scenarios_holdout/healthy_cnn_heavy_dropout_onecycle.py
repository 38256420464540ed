"""Control: CNN with heavy dropout (Dropout2d p=0.3 after each conv block, Dropout p=0.6 in the head).

In training mode the dropout layers zero 30% of the feature maps and 60%
of the head's hidden units on every forward pass, so many activations
are exactly zero at any given step - by design. Units are alive (each
one is active on other steps/samples), the loss is noisier than without
dropout but falls clearly; SGD with Nesterov momentum and OneCycleLR.
Evaluation at the end uses model.eval().
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_block(c_in, c_out, p):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout2d(p))


class DropoutCNN(nn.Module):
    def __init__(self, n_classes=4):
        super().__init__()
        self.features = nn.Sequential(conv_block(1, 16, 0.3), conv_block(16, 32, 0.3))
        self.classifier = nn.Sequential(nn.Flatten(), nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Dropout(0.6), nn.Linear(64, n_classes))

    def forward(self, x):
        return self.classifier(self.features(x))


def make_data(n=1536, size=16, n_classes=4):
    y = torch.randint(0, n_classes, (n,))
    yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
    patterns = torch.stack([torch.sin(xx / 2), torch.sin(yy / 2), torch.sin((xx + yy) / 3), torch.cos((xx - yy) / 2)])
    x = patterns[y].unsqueeze(1) + 1.5 * torch.randn(n, 1, size, size)
    return x, y


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(0)
    x, y = make_data()
    model = DropoutCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=args.steps)

    model.train()
    for step in range(args.steps):
        idx = torch.randint(0, x.shape[0], (args.batch_size,))
        loss = F.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()
        if step % 20 == 0:
            print(f"step {step:3d} loss {loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        acc = (model(x[:512]).argmax(1) == y[:512]).float().mean().item()
    print(f"final loss {loss.item():.4f} eval acc {acc:.3f}")


if __name__ == "__main__":
    main()

"""One training, three ways to fail or not, callable from a program or run as a script (the same steps either
way): healthy (an MLP under Adam), vanishing (a deep sigmoid MLP under SGD), exploding (a linear fit at an lr
far above 2/curvature: every step overshoots further). `batches(mode)` and `make(mode)` let a trainer (Lightning,
HF) run the same model on the same batches."""
import argparse

import torch
import torch.nn as nn

STEPS = 40


class Deep(nn.Module):
    def __init__(self, depth=16, width=64, act=nn.Sigmoid):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(20 if i == 0 else width, width) for i in range(depth))
        self.act = act()
        self.head = nn.Linear(width, 2)

    def forward(self, x):
        for layer in self.layers:
            x = self.act(layer(x))
        return self.head(x)


def make(mode):
    torch.manual_seed(0)
    if mode == "vanishing":
        model = Deep()
        return model, torch.optim.SGD(model.parameters(), lr=0.05), nn.functional.cross_entropy
    if mode == "exploding":
        model = nn.Sequential(nn.Linear(20, 32), nn.Linear(32, 1))
        return model, torch.optim.SGD(model.parameters(), lr=0.4), nn.functional.mse_loss
    model = Deep(depth=2, act=nn.ReLU)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2), nn.functional.cross_entropy


def batches(mode, steps=STEPS):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(512, 20, generator=g)
    y = x.sum(1, keepdim=True) if mode == "exploding" else (x[:, 0] * x[:, 1] > 0).long()
    for _ in range(steps):
        idx = torch.randint(0, len(x), (64,), generator=g)
        yield x[idx], y[idx]


def train(mode="healthy", steps=STEPS):
    model, opt, loss_fn = make(mode)
    for xb, yb in batches(mode, steps):
        opt.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="healthy")
    print(f"final loss {train(p.parse_args().mode):.4f}")

"""Shared helpers for the test training scripts (imported as a sibling module: sys.path[0] is this folder)."""
import argparse

import torch


def args(**defaults):
    p = argparse.ArgumentParser()
    for k, v in defaults.items():
        p.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    return p.parse_args()


def blobs(n=512, d=16, classes=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g)
    w = torch.randn(d, classes, generator=g)
    return x, (x @ w).argmax(1)


def train(model, opt, x, y, steps, loss_fn=None, batch=64, seed=0):
    loss_fn = loss_fn or torch.nn.CrossEntropyLoss()
    g = torch.Generator().manual_seed(seed)
    loss = None
    for _ in range(steps):
        idx = torch.randint(0, len(x), (batch,), generator=g)
        opt.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    print(f"final loss {loss.item():.4f}")
    return loss

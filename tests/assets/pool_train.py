"""A small sweep trained in a multiprocessing.Pool: each task builds and trains its own model and returns its
final loss (the workers end by Pool.terminate when the `with` block closes). --mode picks the bug: healthy, or
explode (the second config's learning rate is far above what its linear fit allows: it diverges)."""
import argparse
import multiprocessing as mp

import torch
import torch.nn as nn


def train_one(cfg):
    lr, steps = cfg
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(64 * steps, 8, generator=g)
    y = x.sum(1, keepdim=True)
    for step in range(steps):
        xb, yb = x[64 * step:64 * (step + 1)], y[64 * step:64 * (step + 1)]
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        opt.step()
    return loss.item()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="healthy")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--start", default=None)
    a = p.parse_args()
    ctx = mp.get_context(a.start)
    configs = [(0.01, a.steps), (0.4 if a.mode == "explode" else 0.02, a.steps)]
    with ctx.Pool(2) as pool:
        losses = pool.map(train_one, configs)
    print("final losses", " ".join(f"{x:.4g}" for x in losses))

"""A diverging SGD run (lr 0.4) that saves checkpoints the way Hugging Face's Trainer does with save_total_limit:
each one into a staging folder (tmp-checkpoint-N: weights, optimizer, trainer_state.json) renamed to checkpoint-N,
the oldest beyond the limit removed with shutil.rmtree after globbing the folder, the best copied with
shutil.copytree. It checks, as it goes, that the folder looks as a real file system would show it."""

import glob
import json
import os
import re
import shutil

import torch
import torch.nn as nn
from common import args

a = args(steps=40, lr=0.4, out="output/hf", every=4, limit=2)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
x = torch.randn(512, 8)
y = x.sum(1, keepdim=True)
g = torch.Generator().manual_seed(0)
best = float("inf")


def checkpoints():
    found = [p for p in glob.glob(os.path.join(a.out, "checkpoint-*")) if os.path.isdir(p)]
    return sorted(found, key=lambda p: int(re.search(r"checkpoint-(\d+)$", p).group(1)))


def save(step, metric):
    global best
    os.makedirs(a.out, exist_ok=True)
    final = os.path.join(a.out, f"checkpoint-{step}")
    staging = os.path.join(a.out, f"tmp-checkpoint-{step}")
    os.makedirs(staging, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(staging, "pytorch_model.bin"))
    torch.save(opt.state_dict(), os.path.join(staging, "optimizer.pt"))
    with open(os.path.join(staging, "trainer_state.json"), "w") as f:
        json.dump({"global_step": step, "metric": metric}, f)
    if os.path.exists(final):
        shutil.rmtree(final)
    os.rename(staging, final)
    assert not os.path.exists(staging) and os.path.isdir(final)
    with open(os.path.join(final, "trainer_state.json")) as f:
        assert json.load(f)["global_step"] == step
    if metric < best:
        best = metric
        shutil.rmtree(os.path.join(a.out, "best"), ignore_errors=True)
        shutil.copytree(final, os.path.join(a.out, "best"))
        assert sorted(os.listdir(os.path.join(a.out, "best"))) == sorted(os.listdir(final))
    before = checkpoints()
    assert final in before, (final, before)
    for old in before[: max(0, len(before) - a.limit)]:
        shutil.rmtree(old)
    now = checkpoints()
    assert now == before[-a.limit :], (before, now)


loss_fn = nn.MSELoss()
for step in range(1, a.steps + 1):
    idx = torch.randint(0, len(x), (64,), generator=g)
    opt.zero_grad()
    loss = loss_fn(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
    if step % a.every == 0:
        value = loss.item()
        save(step, value if value == value and value < 1e30 else 1e30)
print(f"final loss {loss.item():.4f}; checkpoints {[os.path.basename(p) for p in checkpoints()]}")

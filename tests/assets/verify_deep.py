"""A deep ReLU MLP initialised too large for its depth (std 0.5 per layer): the gradients explode from the first
step and the loss diverges to NaN. Clipping the gradient norm cures it; a smaller learning rate does not (the
init is the cause). For `neuraldbg verify`, also what a trial must survive, with --files 1: writes to files that
exist next to the script (overwrite, append, torch.save and reading it back, pathlib, an atomic replace, a
delete, an rmtree), a child process it never waits for (when SPAWN_MARKER is set; its pid is printed), and a
crash when the learning rate a step runs at was changed from outside (as a script that checks its own
config would, in a step pre-hook of its own)."""
import os
import pathlib
import shutil
import subprocess
import sys

import torch
import torch.nn as nn
from common import args

a = args(steps=40, lr=0.05, depth=6, std=0.5, files=0)
torch.manual_seed(0)
hidden = []
for _ in range(a.depth):
    lin = nn.Linear(32, 32)
    nn.init.normal_(lin.weight, std=a.std)
    hidden += [lin, nn.ReLU()]
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), *hidden, nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=a.lr)
if os.environ.get("SPAWN_MARKER"):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", os.environ["SPAWN_MARKER"]])
    print(f"spawned {child.pid}", flush=True)
if a.files:
    with open("log.txt", "w") as f:
        f.write("trial log\n")
    with open("history.txt", "a") as f:
        f.write("one more line\n")
    torch.save(model.state_dict(), "ckpt.pt")
    assert set(torch.load("ckpt.pt")) == set(model.state_dict())  # reads what it wrote
    pathlib.Path("notes.txt").write_text("notes from the trial\n")
    with open("state.json.tmp", "w") as f:
        f.write("{}")
    os.replace("state.json.tmp", "state.json")
    os.remove("old.txt")
    shutil.rmtree("cache")
g = torch.Generator().manual_seed(0)
x = torch.randn(512, 16, generator=g)
y = x[:, :4].sum(1, keepdim=True)


def check_config(optimizer, args_, kwargs):  # the lr each step runs at (a step pre-hook of its own)
    if optimizer.param_groups[0]["lr"] != a.lr:
        raise RuntimeError(f"config check failed: lr is {optimizer.param_groups[0]['lr']}, expected {a.lr}")


opt.register_step_pre_hook(check_config)
for step in range(a.steps):
    idx = torch.randint(0, 512, (64,), generator=g)
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
print(f"final loss {loss.item():.4f}")

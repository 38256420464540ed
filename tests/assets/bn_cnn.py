"""A small BatchNorm CNN on synthetic images, in the layouts whose BatchNorm use is right or wrong:
  --mode healthy       train() for training, eval() under no_grad for validation, train() again
  --mode eval_start    model.eval() (a sanity validation) before the loop, never train(): BN frozen at 0/1
  --mode frozen_bn     a fine-tune with frozen BN (eval mode, parameters requires_grad=False): healthy
  --mode poison        one batch holds an inf: the loss is skipped (the user's guard), BN's running_var is not
  --mode tiny_batch    BatchNorm1d head at batch 4: four values per channel
  --mode groupnorm     GroupNorm instead, at batch 2: healthy
  --mode momentum      BatchNorm(momentum=0.9), Keras' convention
  --mode two_sources   batches alternate between two sources, one normalised, one left raw (a preprocessing
                       step forgotten for one of them): in training mode BN normalises each batch by its own
                       statistics and hides it; eval mode's running statistics fit neither source
  --mode slimming      Adam, and an L1 penalty --lam on the BatchNorm gains (network slimming: about 1e-4); at 0.1
                       it drives every gain to 0 and the layers pass no signal"""
import torch
import torch.nn as nn
from common import args

a = args(mode="healthy", steps=80, lr=0.05, lam=0.1)
torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
n, classes = 512, 4
proto = torch.randn(classes, 3, 8, 8, generator=g)
y_all = torch.randint(0, classes, (n,), generator=g)
x_all = proto[y_all] + 0.8 * torch.randn(n, 3, 8, 8, generator=g) + 2.0  # offset and scale BN has to learn
mean, std = x_all.mean(), x_all.std()


def norm2d(c):
    return nn.GroupNorm(4, c) if a.mode == "groupnorm" else nn.BatchNorm2d(c, momentum=0.9 if a.mode == "momentum" else 0.1)


def norm1d(c):
    return nn.GroupNorm(4, c) if a.mode == "groupnorm" else nn.BatchNorm1d(c, momentum=0.9 if a.mode == "momentum" else 0.1)


model = nn.Sequential(
    nn.Conv2d(3, 16, 3, padding=1), norm2d(16), nn.ReLU(),
    nn.Conv2d(16, 16, 3, padding=1), norm2d(16), nn.ReLU(),
    nn.AdaptiveAvgPool2d(1), nn.Flatten(),
    nn.Linear(16, 32), norm1d(32), nn.ReLU(), nn.Linear(32, classes),
)
if a.mode == "frozen_bn":  # as detection fine-tunes freeze a pretrained backbone's BatchNorm
    with torch.no_grad():  # "pretrained" statistics: a few train-mode passes over the data
        for i in range(0, n, 64):
            model(x_all[i : i + 64])
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.weight.requires_grad_(False)
            m.bias.requires_grad_(False)
params = [p for p in model.parameters() if p.requires_grad]
if a.mode == "slimming":
    opt = torch.optim.Adam(params, lr=1e-2)
elif a.mode in ("tiny_batch", "groupnorm"):
    opt = torch.optim.Adam(params, lr=1e-3)
else:
    opt = torch.optim.SGD(params, lr=a.lr, momentum=0.9)
batch = {"tiny_batch": 4, "groupnorm": 2}.get(a.mode, 64)
if a.mode == "eval_start":
    model.eval()
    with torch.no_grad():
        print("sanity val loss", nn.functional.cross_entropy(model(x_all[:64]), y_all[:64]).item())


def set_mode():
    model.train()
    if a.mode == "frozen_bn":
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()


if a.mode != "eval_start":
    set_mode()
for step in range(a.steps):
    idx = torch.randint(0, n, (batch,), generator=g)
    x, y = x_all[idx], y_all[idx]
    if a.mode == "two_sources" and step % 2 == 0:  # the normalised source
        x = (x - mean) / std
    if a.mode == "poison" and step == 25:
        x = x.clone()
        x[0, 0, 0, 0] = float("inf")
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    if a.mode == "slimming":
        loss = loss + a.lam * sum(m.weight.abs().sum() for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm))
    if not torch.isfinite(loss):
        print(f"step {step}: non-finite loss, batch skipped")
        continue
    loss.backward()
    opt.step()
    if step % 20 == 19:
        model.eval()
        with torch.no_grad():
            val = nn.functional.cross_entropy(model(x_all[:128]), y_all[:128]).item()
        print(f"step {step}: loss {loss.item():.4f} val {val:.4f}")
        if a.mode != "eval_start":
            set_mode()

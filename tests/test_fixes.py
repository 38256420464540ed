"""fixes.py in-process: each fix does what verify's trials rely on, and leaves nothing installed."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from neuraldbg_cli import fixes, fixspec
from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.hookset import HookSet


def _install(text: str):
    hooks = HookSet()
    applied = fixes.install(*fixspec.parse(text), hooks)
    return hooks, applied


def test_lr_scale_reaches_groups_defaults_and_schedulers():
    model = nn.Linear(4, 2)
    with _install("lr_scale:factor=0.1")[0]:
        opt = torch.optim.SGD([{"params": [model.weight], "lr": 0.5}, {"params": [model.bias]}], lr=0.2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0)
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.05, 0.02])
    assert opt.defaults["lr"] == pytest.approx(0.02) and sched.base_lrs == pytest.approx([0.05, 0.02])
    assert torch.optim.SGD(model.parameters(), lr=0.2).param_groups[0]["lr"] == 0.2  # undone


def test_warmup_scales_each_step_and_restores_the_lr():
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    seen = []
    hooks, applied = _install("warmup:steps=4")
    with hooks:
        handle = opt.register_step_pre_hook(lambda o, a, k: seen.append(o.param_groups[0]["lr"]))
        for _ in range(5):
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
        handle.remove()
    assert seen == pytest.approx([0.25, 0.5, 0.75, 1.0, 1.0]) and opt.param_groups[0]["lr"] == 1.0
    assert applied.count == 3


def test_clip_weight_decay_bn_and_activation_swap():
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.Linear(8, 1), nn.Sigmoid())
    model.eval()  # BatchNorm left in eval mode
    hooks = HookSet()
    clip = fixes.install("clip_grad_norm", {"max_norm": 1.0}, hooks)
    decay = fixes.install("weight_decay", {"value": 0.01}, hooks)
    bn = fixes.install("bn_train_mode", {}, hooks)
    swap = fixes.install("activation_swap", {"to": "ReLU"}, hooks)
    with hooks:
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        (1000 * model(torch.randn(16, 4))).sum().backward()
        opt.step()
        total = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
        with torch.no_grad():
            model(torch.randn(2, 4))
        validation_mode = model[1].training
    assert float(total) == pytest.approx(1.0, rel=1e-4) and clip.count == 1
    assert opt.param_groups[0]["weight_decay"] == 0.01 and decay.count == 1
    assert bn.count == 1 and model[1].running_mean.abs().sum() > 0 and validation_mode is False
    assert isinstance(model[2], nn.ReLU) and isinstance(model[4], nn.Sigmoid) and swap.count == 1  # output kept


def test_seed_offsets_the_scripts_own_seeds():
    draws = []
    for s in (1, 2):
        with HookSet() as hooks:
            fixes.seed(s, hooks)
            torch.manual_seed(0)
            draws.append(torch.rand(3))
    torch.manual_seed(0)
    plain = torch.rand(3)
    assert not torch.equal(draws[0], draws[1]) and not torch.equal(draws[0], plain)


def test_specs_parse_and_print():
    assert fixspec.parse("lr_scale:factor=10") == ("lr_scale", {"factor": 10.0})
    assert fixspec.spec("clip_grad_norm", {"max_norm": 1.0}) == "clip_grad_norm:max_norm=1"
    assert fixspec.parse("bn_train_mode") == ("bn_train_mode", {})
    for bad in ("nope", "lr_scale:factor=-1", "lr_scale:factor", "warmup:steps=x"):
        with pytest.raises(NeuraldbgError):
            fixspec.parse(bad)

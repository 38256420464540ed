"""fixes.py in-process: each fix does what verify's trials rely on, and leaves nothing installed."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.reason import fixspec
from neuraldbg_cli.verify import fixes


def _install(text: str):
    hooks = HookSet()
    applied = fixes.install(*fixspec.parse(text), hooks)
    return hooks, applied


def test_lr_scale_holds_whoever_sets_the_lr_and_restores_it_after_each_step():
    """Each step runs at factor x the groups' lr (a step pre-hook reads it there), the lr is the script's again
    after the step: a scheduler and a script that writes param_group["lr"] every iteration (nanoGPT, timm) keep
    their own values, and the factor applies on top of them."""
    model = nn.Linear(4, 2)
    seen = []
    hooks, applied = _install("lr_scale:factor=0.1")
    with hooks:
        opt = torch.optim.SGD([{"params": [model.weight], "lr": 0.5}, {"params": [model.bias]}], lr=0.2)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 1.0 / (k + 1))
        handle = opt.register_step_pre_hook(lambda o, a, k: seen.append([g["lr"] for g in o.param_groups]))
        for it in range(3):
            if it == 2:
                for g in opt.param_groups:  # the script's own schedule, written every iteration
                    g["lr"] = 1.0
            model(torch.ones(1, 4)).sum().backward()
            opt.step()
            sched.step()
        handle.remove()
    assert sum(seen, []) == pytest.approx([0.05, 0.02, 0.025, 0.01, 0.1, 0.1]) and applied.count == 3
    assert sched.base_lrs == pytest.approx([0.5, 0.2]) and [g["lr"] for g in opt.param_groups] == pytest.approx(
        [0.5 / 4, 0.2 / 4])  # the scheduler's own values (its third step: base_lrs / 4), unscaled
    opt2 = torch.optim.SGD(model.parameters(), lr=0.2)
    seen.clear()
    opt2.register_step_pre_hook(lambda o, a, k: seen.append(o.param_groups[0]["lr"]))
    model(torch.ones(1, 4)).sum().backward()
    opt2.step()
    assert seen == [0.2]  # undone


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
    swap = fixes.install("activation_swap", {"to": "ReLU", "init": "keep"}, hooks)
    kept = model[0].weight.detach().clone()
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
    step = 0.1 * (model[0].weight.grad + 0.01 * kept)  # init=keep: the weights changed by the SGD step only
    assert torch.allclose(model[0].weight.detach(), kept - step, atol=1e-6)


def _std(t: torch.Tensor) -> float:
    return float(t.detach().std())


def test_reinit_one_layer_type_at_the_first_training_call():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Conv1d(1, 4, 3))
    frozen = model[2]
    for lin in (model[0], model[2]):
        nn.init.normal_(lin.weight, std=5.0)
        nn.init.constant_(lin.bias, -20.0)  # every unit off: dead from the start
    frozen.requires_grad_(False)  # a frozen (pretrained) layer stays as the script has it
    conv = model[4].weight.detach().clone()
    x = torch.randn(64, 256)
    hooks, applied = _install("reinit:layer=Linear,init=kaiming")
    with hooks:
        with torch.no_grad():
            model[:2](x)  # a validation pass: nothing happens yet
        assert _std(model[0].weight) == pytest.approx(5.0, rel=0.02) and applied.count == 0
        model[:2](x).sum().backward()  # the first training call
        assert _std(model[0].weight) == pytest.approx((2 / 256) ** 0.5, rel=0.05)  # He: sqrt(2 / fan_in)
        assert not model[0].bias.any() and applied.count == 1
        with torch.no_grad():
            model[0].weight.fill_(0.5)  # as an update would
        model[:4](x).sum().backward()  # a later training call, through another wrapper
    assert bool((model[0].weight == 0.5).all())  # not done twice
    assert _std(frozen.weight) == pytest.approx(5.0, rel=0.02) and bool((frozen.bias == -20.0).all())
    assert torch.equal(model[4].weight, conv) and applied.count == 1  # another layer type: untouched
    with HookSet() as again:
        applied = fixes.install("reinit", {"layer": "Conv1d", "init": "xavier"}, again)
        model[4](torch.randn(2, 1, 8))
    bound = (6 / (3 + 12)) ** 0.5  # xavier_uniform_: U(-sqrt(6 / (fan_in + fan_out)), +...)
    assert not torch.equal(model[4].weight, conv) and bool((model[4].weight.abs() <= bound).all())
    assert not model[4].bias.any() and applied.count == 1


def test_activation_swap_reinitialises_for_the_new_activation():
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(3) for m in (nn.Linear(128, 128), nn.Sigmoid())], nn.Linear(128, 2))
    hooks, applied = _install("activation_swap")
    with hooks:
        model(torch.randn(8, 128)).sum().backward()
    assert [type(m).__name__ for m in model][:6] == ["Linear", "ReLU"] * 3 and applied.count == 3
    assert all(_std(m.weight) == pytest.approx((2 / 128) ** 0.5, rel=0.05) for m in model if isinstance(m, nn.Linear))


def test_adam_eps_only_in_adam_family_optimizers():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 2)).half()  # float16 state: 1e-8 is 0 there
    x, y = torch.randn(64, 16).half(), torch.randint(0, 2, (64,))
    hooks, applied = _install("adam_eps")
    with hooks:
        adam = torch.optim.Adam([{"params": model[0].parameters(), "eps": 1e-10}, {"params": model[2].parameters()}])
        adamw = torch.optim.AdamW(model.parameters())
        rms = torch.optim.RMSprop(model.parameters(), eps=1e-8)
    assert [g["eps"] for g in adam.param_groups] == [1e-4, 1e-4] and adam.defaults["eps"] == 1e-4
    assert adamw.param_groups[0]["eps"] == 1e-4 and rms.param_groups[0]["eps"] == 1e-8 and applied.count == 3
    nn.functional.cross_entropy(model(x).float(), y).backward()
    adam.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    torch.optim.Adam(model.parameters()).step()  # undone: the default eps, 0 in float16: 0 / 0 where a grad is 0
    assert not all(torch.isfinite(p).all() for p in model.parameters())


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
    assert fixspec.parse("reinit:layer=Conv2d") == ("reinit", {"layer": "Conv2d", "init": "kaiming"})
    assert fixspec.spec("adam_eps", {"value": 1e-4}) == "adam_eps:value=0.0001"
    for bad in ("nope", "lr_scale:factor=-1", "lr_scale:factor", "warmup:steps=x", "reinit:init=orthogonal",
                "activation_swap:to=ELU", "adam_eps:value=0"):
        with pytest.raises(NeuraldbgError):
            fixspec.parse(bad)


def test_drop_output_relu_replaces_a_models_last_relu_module_only():
    """A Sequential ending in nn.ReLU gets nn.Identity there at its first training call (negative outputs come back);
    a ReLU applied in forward() is no module and stays, and the trial says nothing was applied."""
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.ReLU())
    hooks, applied = _install("drop_output_relu")
    with hooks:
        seq(torch.randn(5, 4)).sum().backward()
        assert isinstance(seq[3], nn.Identity) and isinstance(seq[1], nn.ReLU) and applied.count == 1
        assert seq[3](torch.tensor([-1.0])).item() == -1.0  # outputs may be negative again

    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.fc(x))

    hooks, applied = _install("drop_output_relu")
    with hooks:
        Functional()(torch.randn(2, 4)).sum().backward()
    assert applied.count == 0


def test_without_seeds_a_trial_starts_its_rngs_paired_and_leaves_the_scripts_own_seeding_alone(tmp_path):
    """No --seeds: every trial (the control too) seeds torch, random and numpy with the same value at start, so an
    unseeded script draws the same weights and batches in each; a script's own manual_seed still means what it did."""
    import random

    from neuraldbg_cli.reason.fixspec import ENV_MAX_STEPS
    from neuraldbg_cli.verify.trial import Trial

    draws = []
    for _ in range(2):
        trial = Trial(tmp_path, {ENV_MAX_STEPS: "5"})
        trial.install()
        draws.append((torch.randn(3).tolist(), random.random()))
        torch.manual_seed(7)  # the script seeding itself: not offset (that is --seeds)
        seeded = torch.randn(2)
        trial.close(lambda name, doc: draws.append(doc))
        assert torch.equal(seeded, torch.randn(2, generator=torch.Generator().manual_seed(7)))
    assert draws[0] == draws[2] and draws[1]["paired_seed"] == 0 and draws[1]["seed"] is None

"""Torch side of the fixes (fixspec.py holds them as data): the one implementation of each, applied to a trial
run from outside the script with global hooks and patches held by a HookSet, so that they are undone when the
run ends. `install` also seeds a trial (`--seeds`)."""

from __future__ import annotations

import random
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.nn.modules.batchnorm import _BatchNorm
from torch.optim import optimizer as _optimizer

from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.reason.fixspec import FIXES, PAIRED_SEED


class Applied:
    """What a fix did in this run: `count` changes (groups scaled, steps clipped, layers switched...), and why
    it did nothing where it could not apply (`report()`: trial.json's "fix")."""

    def __init__(self, fix_id: str, params: dict[str, Any], unit: str, none_reason: str) -> None:
        self.fix_id, self.params, self.unit, self.none_reason = fix_id, params, unit, none_reason
        self.count = 0
        self.error: str | None = None

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.fix_id, "params": self.params, "applied": self.count, "unit": self.unit}
        if not self.count:
            out["skipped"] = self.none_reason
        if self.error:
            out["error"] = self.error
        return out


def install(fix_id: str, params: dict[str, Any], hooks: HookSet) -> Applied:
    """Apply fix `fix_id` (a fixspec.FIXES id, `params` complete) for the rest of the run."""
    if fix_id not in FIXES:
        raise ValueError(f"unknown fix {fix_id!r}")
    return _INSTALL[fix_id](params, hooks)


def _on_groups(
    hooks: HookSet,
    change: Callable[[dict[str, Any]], None],
    applied: Applied,
    key: str,
    accepts: Callable[[Any], bool] = lambda opt: True,
) -> None:
    """Optimizer.add_param_group patched (Optimizer.__init__ adds every group through it): `change` each group
    once, and the optimizer's `defaults[key]` once, before the first group takes its default from it. So
    schedulers built afterwards copy the changed value (initial_lr, base_lrs). Only optimizers `accepts` takes."""
    original = torch.optim.Optimizer.__dict__["add_param_group"]
    seen: weakref.WeakSet[Any] = weakref.WeakSet()
    done: dict[int, dict[str, Any]] = {}  # id -> group (kept: ids stay unique): a wrapper optimizer re-adds
    # its inner optimizer's groups, which must not change twice

    def add_param_group(opt: Any, param_group: dict[str, Any]) -> Any:
        if not accepts(opt):
            return original(opt, param_group)
        if opt not in seen:
            seen.add(opt)
            defaults = getattr(opt, "defaults", None)
            if isinstance(defaults, dict) and key in defaults:
                change(defaults)
        fresh = isinstance(param_group, dict) and id(param_group) not in done
        explicit = fresh and key in param_group
        out = original(opt, param_group)
        if fresh and key in param_group:
            if explicit:
                change(param_group)
            done[id(param_group)] = param_group
            applied.count += 1
        return out

    hooks.patch(torch.optim.Optimizer, "add_param_group", add_param_group)


def _lr_scale(params: dict[str, Any], hooks: HookSet) -> Applied:
    """Each optimizer step runs at `factor` times its groups' lr, put back after the step (as the warm-up fix): so
    the fix holds whoever sets the lr (a torch scheduler, or a script that writes param_group["lr"] every
    iteration, as nanoGPT's and timm's loops do), and those read and set the lr as if it were not scaled."""
    factor = float(params["factor"])
    applied = Applied("lr_scale", params, "optimizer steps", "no optimizer step was taken")
    saved: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        before: list[Any] = []
        for g in opt.param_groups:
            lr = g.get("lr")
            if isinstance(lr, torch.Tensor):
                before.append(lr.detach().clone())
                with torch.no_grad():
                    lr.mul_(factor)
            elif isinstance(lr, (int, float)) and not isinstance(lr, bool):
                before.append(lr)
                g["lr"] = lr * factor
            else:
                before.append(None)
        saved[opt] = before
        applied.count += 1

    def post_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        before = saved.pop(opt, None)
        for g, lr in zip(opt.param_groups, before or []):
            if isinstance(lr, torch.Tensor) and isinstance(g.get("lr"), torch.Tensor):
                with torch.no_grad():
                    g["lr"].copy_(lr)
            elif lr is not None:
                g["lr"] = lr

    hooks.add(_optimizer.register_optimizer_step_pre_hook(pre_step))
    hooks.add(_optimizer.register_optimizer_step_post_hook(post_step))
    return applied


def _weight_decay(params: dict[str, Any], hooks: HookSet) -> Applied:
    value = float(params["value"])
    applied = Applied("weight_decay", params, "param groups", "no optimizer with a weight_decay setting was built")

    def set_decay(group: dict[str, Any]) -> None:
        group["weight_decay"] = value

    _on_groups(hooks, set_decay, applied, "weight_decay")
    return applied


def _minimize(params: dict[str, Any], hooks: HookSet) -> Applied:
    applied = Applied("minimize", params, "param groups", "no optimizer with a maximize setting was built")

    def descend(group: dict[str, Any]) -> None:
        group["maximize"] = False

    _on_groups(hooks, descend, applied, "maximize")
    return applied


def _adam_eps(params: dict[str, Any], hooks: HookSet) -> Applied:
    """eps of Adam-family optimizers only (Adam, AdamW, NAdam, RAdam, Adamax...): the same name means other
    things in Adagrad or RMSprop."""
    value = float(params["value"])
    applied = Applied("adam_eps", params, "param groups", "no Adam-family optimizer was built")

    def set_eps(group: dict[str, Any]) -> None:
        group["eps"] = value

    _on_groups(hooks, set_eps, applied, "eps", accepts=lambda opt: "adam" in type(opt).__name__.lower())
    return applied


def _grad_params(opt: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [p for g in opt.param_groups for p in g["params"] if p.grad is not None]


def _clip_grad_norm(params: dict[str, Any], hooks: HookSet) -> Applied:
    """Registered before the probe's own step pre-hook: the probe reads the clipped gradients, as it would when
    the script clipped them itself."""
    max_norm = float(params["max_norm"])
    applied = Applied("clip_grad_norm", params, "optimizer steps", "no optimizer step was taken")

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        grads = _grad_params(opt)
        if grads:
            torch.nn.utils.clip_grad_norm_(grads, max_norm)
            applied.count += 1

    hooks.add(_optimizer.register_optimizer_step_pre_hook(pre_step))
    return applied


def _zero_grad(params: dict[str, Any], hooks: HookSet) -> Applied:
    """Each optimizer's parameters' gradients set to None right after its step, as optimizer.zero_grad() after
    optimizer.step() does (set directly: the probe's patched zero_grad() reads a call as the script's own).
    Registered before the probe's own step post-hook, which then finds them cleared, as in a script that zeroes."""
    applied = Applied("zero_grad", params, "optimizer steps", "no optimizer step was taken")

    def post_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        for group in opt.param_groups:
            for p in group["params"]:
                p.grad = None
        applied.count += 1

    hooks.add(_optimizer.register_optimizer_step_post_hook(post_step))
    return applied


def _scheduler_per_epoch(params: dict[str, Any], hooks: HookSet) -> Applied:
    """An lr scheduler stepped every batch although its steps are epochs: its step() calls within an epoch (one
    pass over a DataLoader) are held back, and it takes one step when the next epoch begins, as a scheduler
    stepped at each epoch's end does. A script without DataLoader epochs, and a scheduler stepped with arguments
    (ReduceLROnPlateau's metric), are left as they are."""
    from torch.utils.data import DataLoader

    applied = Applied(
        "scheduler_per_epoch", params, "scheduler steps held back", "no scheduler was stepped twice in one epoch"
    )
    base = torch.optim.lr_scheduler.LRScheduler
    step, iterate = base.__dict__["step"], DataLoader.__dict__["__iter__"]
    state = {"epochs": 0}
    stepped: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()  # scheduler -> its epoch's calls

    def new_epoch(loader: Any) -> Any:
        state["epochs"] += 1
        for sched, calls in list(stepped.items()):
            if calls:
                step(sched)  # the step of the epoch that just ended
                stepped[sched] = 0
        return iterate(loader)

    def held(sched: Any, *args: Any, **kwargs: Any) -> Any:
        if not state["epochs"] or args or kwargs or not _has_stepped(sched):  # construction, or before any epoch
            return step(sched, *args, **kwargs)
        calls = stepped[sched] = stepped.get(sched, 0) + 1
        applied.count += calls > 1  # a second call within one epoch: held back
        return None

    hooks.patch(DataLoader, "__iter__", new_epoch)
    hooks.patch(base, "step", held)
    return applied


def _has_stepped(sched: Any) -> bool:
    """Whether the scheduler has taken its construction step (LRScheduler sets `_step_count` there)."""
    return bool(getattr(sched, "_step_count", 0))


def _warmup(params: dict[str, Any], hooks: HookSet) -> Applied:
    """Each optimizer's k-th step (0-based) runs at min(1, (k+1)/steps) of its groups' lr, put back after the step:
    the script's own schedulers read and set the lr as if there were no warm-up."""
    k_max = int(params["steps"])
    applied = Applied("warmup", params, "optimizer steps", "no optimizer step was taken")
    taken: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
    saved: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()

    def pre_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        k = taken.get(opt, 0)
        taken[opt] = k + 1
        if k + 1 >= k_max:
            return
        scale = (k + 1) / k_max
        saved[opt] = [g.get("lr") for g in opt.param_groups]
        for g in opt.param_groups:
            if isinstance(g.get("lr"), (int, float)) and not isinstance(g.get("lr"), bool):
                g["lr"] = g["lr"] * scale
        applied.count += 1

    def post_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        lrs = saved.pop(opt, None)
        if lrs is not None:
            for g, lr in zip(opt.param_groups, lrs):
                g["lr"] = lr

    hooks.add(_optimizer.register_optimizer_step_pre_hook(pre_step))
    hooks.add(_optimizer.register_optimizer_step_post_hook(post_step))
    return applied


def _trainable_bn(module: torch.nn.Module) -> bool:
    """A BatchNorm meant to train: frozen ones (parameters with requires_grad=False) stay as the script has them."""
    return isinstance(module, _BatchNorm) and any(p.requires_grad for p in module.parameters(recurse=False))


def _bn_train_mode(params: dict[str, Any], hooks: HookSet) -> Applied:
    """A BatchNorm called in eval mode with gradients enabled (a training forward) is put in training mode; one
    switched so and then called under no_grad (validation) goes back to eval mode for it. (Switched in the
    pre-hook and left so, not put back after the call: the probe reads the mode after the forward.)"""
    applied = Applied("bn_train_mode", params, "training forwards", "no BatchNorm ran in eval mode with gradients on")
    switched: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()

    def pre(module: torch.nn.Module, args: Any) -> None:
        if not isinstance(module, _BatchNorm):
            return
        if torch.is_grad_enabled():
            if not module.training and _trainable_bn(module):
                module.training = True
                switched.add(module)
                applied.count += 1
        elif module.training and module in switched:
            module.training = False

    hooks.add(_module.register_module_forward_pre_hook(pre))
    return applied


Tree = list[tuple[str, torch.nn.Module]]


def _on_first_training_call(hooks: HookSet, act: Callable[[Tree], None], applied: Applied) -> None:
    """`act(named modules)` once per model, at its first call with gradients on: the script has built and
    initialised it, no update has touched it yet. Modules an earlier call handed over (a submodule called on
    its own first) are left out, so nothing is done twice or after training began. An error stays here (in
    trial.json), out of the script's forward."""
    done: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()

    def pre(module: torch.nn.Module, args: Any) -> None:
        if module in done or not torch.is_grad_enabled():
            return
        tree = [(name, m) for name, m in module.named_modules() if m not in done]
        done.update(m for _, m in tree)
        try:
            act(tree)
        except Exception as e:  # noqa: BLE001 - the trial goes on; verify reads the error
            applied.error = f"{type(e).__name__}: {e}"

    hooks.add(_module.register_module_forward_pre_hook(pre))


_INIT: dict[str, Callable[[torch.Tensor], Any]] = {
    "kaiming": lambda w: torch.nn.init.kaiming_normal_(w, nonlinearity="relu"),
    "xavier": torch.nn.init.xavier_uniform_,
}
_WEIGHT_LAYERS = (torch.nn.Linear, torch.nn.modules.conv._ConvNd)


def _reinit_tree(tree: Tree, picks: Callable[[torch.nn.Module], bool], init: str) -> int:
    """Re-initialise the trainable matrix/kernel weights of the modules `picks` takes, biases zeroed (a bias
    initialised far from 0 is what keeps units dead); frozen ones stay as the script has them. The count."""
    count = 0
    with torch.no_grad():
        for _, m in tree:
            w = getattr(m, "weight", None)
            if not picks(m) or not isinstance(w, torch.nn.Parameter) or not w.requires_grad:
                continue
            if isinstance(w, torch.nn.parameter.UninitializedParameter) or w.dim() < 2:
                continue
            _INIT[init](w)
            bias = getattr(m, "bias", None)
            if isinstance(bias, torch.nn.Parameter) and bias.requires_grad:
                bias.zero_()
            count += 1
    return count


def _reinit(params: dict[str, Any], hooks: HookSet) -> Applied:
    """Layers of one class (by name, e.g. Linear or Conv2d), at their model's first training call."""
    layer, init = str(params["layer"]), str(params["init"])
    applied = Applied("reinit", params, "layers", f"no trainable nn.{layer} with a weight matrix was called")
    if init not in _INIT:
        applied.none_reason = f"unknown init {init!r} ({' or '.join(_INIT)})"
        return applied

    def act(tree: Tree) -> None:
        applied.count += _reinit_tree(tree, lambda m: type(m).__name__ == layer, init)

    _on_first_training_call(hooks, act, applied)
    return applied


def _drop_output_relu(params: dict[str, Any], hooks: HookSet) -> Applied:
    """A model whose last leaf module is an nn.ReLU (the one a Sequential of Linear/ReLU pairs kept after its last
    layer) gets nn.Identity there, at its first training call: its outputs can go below 0 again. A ReLU applied
    in forward() (F.relu) is not a module and is left as it is: the trial says so."""
    applied = Applied("drop_output_relu", params, "modules", "no model ends with an nn.ReLU module")

    def act(tree: Tree) -> None:
        leaves = [(name, m) for name, m in tree if not any(True for _ in m.children())]
        if not leaves or type(leaves[-1][1]) is not torch.nn.ReLU:
            return
        name = leaves[-1][0]
        parent_name, _, child = name.rpartition(".")
        parent = dict(tree).get(parent_name)
        if parent is not None and child:
            setattr(parent, child, torch.nn.Identity())
            applied.count += 1

    _on_first_training_call(hooks, act, applied)
    return applied


_SWAPPABLE = (torch.nn.Sigmoid, torch.nn.Tanh)


def _activation_swap(params: dict[str, Any], hooks: HookSet) -> Applied:
    """nn.Sigmoid/nn.Tanh modules replaced by nn.ReLU/nn.GELU in a model at its first training call, except
    its last leaf module (an output squashed for the loss, e.g. before BCELoss); its Linear/Conv layers
    re-initialised for the new activation (init=kaiming: He, made for ReLU; keep: as they were). The swap
    alone leaves weights scaled for sigmoid, with which a deep ReLU stack still vanishes."""
    target, init = str(params["to"]), str(params["init"])
    make = {"ReLU": torch.nn.ReLU, "GELU": torch.nn.GELU}.get(target)
    applied = Applied("activation_swap", params, "modules", "no nn.Sigmoid/nn.Tanh module was called")
    if make is None or init not in (*_INIT, "keep"):
        applied.none_reason = f"cannot swap to {target!r} (ReLU or GELU) with init {init!r} (kaiming, xavier, keep)"
        return applied

    def act(tree: Tree) -> None:
        leaves = [name for name, m in tree if not any(True for _ in m.children())]
        last = leaves[-1] if leaves else None
        swapped = 0
        for name, m in tree:
            for child_name, child in list(m.named_children()):
                full = f"{name}.{child_name}" if name else child_name
                if type(child) in _SWAPPABLE and full != last:
                    setattr(m, child_name, make())
                    swapped += 1
        if swapped and init != "keep":
            _reinit_tree(tree, lambda m: isinstance(m, _WEIGHT_LAYERS), init)
        applied.count += swapped

    _on_first_training_call(hooks, act, applied)
    return applied


_INSTALL: dict[str, Callable[[dict[str, Any], HookSet], Applied]] = {
    "lr_scale": _lr_scale,
    "clip_grad_norm": _clip_grad_norm,
    "warmup": _warmup,
    "weight_decay": _weight_decay,
    "adam_eps": _adam_eps,
    "bn_train_mode": _bn_train_mode,
    "reinit": _reinit,
    "activation_swap": _activation_swap,
    "zero_grad": _zero_grad,
    "scheduler_per_epoch": _scheduler_per_epoch,
    "minimize": _minimize,
    "drop_output_relu": _drop_output_relu,
}
assert set(_INSTALL) == set(FIXES), "every fixspec.FIXES id needs its implementation here"


def pair() -> None:
    """Without --seeds: torch, random and numpy seeded with PAIRED_SEED at start, the script's own seed calls left
    as they are. A script that seeds itself runs exactly as it did; one that does not draws the same initial
    weights and batches in the control and in every trial, so a trial differs from its control by its fix alone
    (unseeded, the two differed by their draws too, and one unlucky draw decided a verdict)."""
    _seed_globals(PAIRED_SEED)


def _seed_globals(value: int) -> None:
    """torch's, random's and numpy's global generators seeded with `value` (numpy when installed)."""
    torch.manual_seed(value)
    random.seed(value)
    try:
        import numpy as np
    except ImportError:
        return
    np.random.seed(value)


def seed(value: int, hooks: HookSet) -> None:
    """Seed torch, random and numpy with `value`, and offset the script's own seeds by it (torch.manual_seed(0)
    in the script seeds with a number derived from 0 and `value`): each --seeds run draws other batches and
    initial weights, also in a script that seeds itself."""
    offset = 1_000_003 * value

    def shifted(original: Callable[..., Any], mod: int) -> Callable[..., Any]:
        def seeded(s: Any = None, *args: Any, **kwargs: Any) -> Any:
            if isinstance(s, int) and not isinstance(s, bool):
                s = (s + offset) % mod
            return original(s, *args, **kwargs)

        return seeded

    _seed_globals(value)
    hooks.patch(torch, "manual_seed", shifted(torch.__dict__["manual_seed"], 1 << 63))
    hooks.patch(torch.random, "manual_seed", shifted(torch.random.__dict__["manual_seed"], 1 << 63))
    hooks.patch(random, "seed", shifted(random.__dict__["seed"], 1 << 63))
    try:
        import numpy as np
    except ImportError:
        return
    hooks.patch(np.random, "seed", shifted(np.random.__dict__["seed"], 1 << 32))

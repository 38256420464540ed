"""The optimizers of the run, held weakly: which exist (a step is paced by optimizer steps only while one
does), the loss series each one's steps belong to, whether the leading one is still in play, and their
description for the run directory (also of those already gone: a pre-training phase's)."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.paramsets import ParamSets
from neuraldbg_cli.probe.stepclock import series_name
from neuraldbg_cli.vocab import warms_up


class _Series(NamedTuple):
    owners: tuple  # the ParamSet owners it was named from: compared by identity (they are cached)
    every: tuple
    name: str


LR_POINTS = 64  # (step, lrs) points kept per optimizer: past it every other one is dropped (the span stays covered)


class OptimizerWatch:
    """`changed()` is called when an optimizer appears (the models' description says which parameters
    some optimizer has)."""

    def __init__(self, sets: ParamSets, changed: Callable[[], None], guard: Guard) -> None:
        self._sets, self._changed, self._guard = sets, changed, guard
        # in the order they appeared (a dict, unlike a WeakSet, keeps it): model.json lists them so
        self.optimizers: weakref.WeakKeyDictionary[torch.optim.Optimizer, None] = weakref.WeakKeyDictionary()
        self._described: dict[int, dict[str, Any]] = {}  # id(optimizer) -> description, kept after it is gone
        self._series: weakref.WeakKeyDictionary[Any, _Series] = weakref.WeakKeyDictionary()
        self._lr_at: dict[int, list[list[float]]] = {}  # id(optimizer) -> [step, lr of each group] when it changed
        self.notes: dict[int, dict[str, Any]] = {}  # id(optimizer) -> more for its description (loopprobe's lines)

    def record_lr(self, opt: torch.optim.Optimizer, step: int) -> None:
        """The learning rate of each group in force at a sampled step (host floats, no device work), kept when it
        changed. Why: a schedule changes the lr after the optimizer is described (a warm-up starts near 0, a
        LambdaLR or OneCycle multiplies it upward); advice must quote the lr in force when a symptom began."""
        lrs = [g.get("lr") for g in opt.param_groups]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in lrs):
            return  # a tensor lr (capturable): reading it would synchronise the device
        log = self._lr_at.setdefault(id(opt), [])
        if log and log[-1][1:] == lrs:
            return
        log.append([step, *map(float, lrs)])  # type: ignore[arg-type]
        if len(log) > LR_POINTS:
            del log[1:-1:2]  # thin: the first and the latest stay

    def wrap_init(self, original: Callable) -> Callable:
        """Optimizer.__init__, patched: an optimizer counts from its creation (before its first step, a
        backward pass is a step only when no optimizer exists)."""
        watch = self

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            try:
                watch.optimizers[opt] = None
                watch._changed()
            except Exception as e:  # noqa: BLE001
                watch._guard.fault("optimizer", e)

        return __init__

    def stepped(self, opt: torch.optim.Optimizer) -> None:
        """An optimizer stepped: one created before the hooks were installed is known from now on."""
        if opt not in self.optimizers:
            self.optimizers[opt] = None
            self._changed()

    def series(self, opt: torch.optim.Optimizer) -> str:
        """stepclock.series_name of this optimizer, cached while its and all observed parameters are the same."""
        owners, every = self._sets.of_optimizer(opt).owners, self._sets.every().owners
        hit = self._series.get(opt)
        if hit is None or hit.owners is not owners or hit.every is not every:
            hit = self._series[opt] = _Series(owners, every, series_name(owners, every))
        return hit.name

    def alive(self, key: Hashable, active: set[str]) -> bool:
        """Whether the optimizer with id `key` is still in play: it exists and, when the roots that ran in
        this step (`active`) are known, one of the models it trains ran (a teacher trained first, then frozen
        and only used under no_grad, hands the lead to the student's optimizer at its first step)."""
        opt = next((o for o in list(self.optimizers) if id(o) == key), None)
        if opt is None:
            return False
        roots = {root for root, _ in self._sets.of_optimizer(opt).owners}
        return not active or not roots or not roots.isdisjoint(active)

    def describe(self) -> list[dict[str, Any]]:
        """Every optimizer the run used, in the order they appeared: type, hyperparameters per group (betas as a
        list), number of parameters and their dtypes (its state has theirs: an eps too small for float16 is 0
        there), the root models it trains and the lrs it was seen with."""
        for opt in list(self.optimizers):
            groups = [{k: v for k, v in g.items() if k != "params" and _plain(v)} for g in opt.param_groups]
            params = [p for g in opt.param_groups for p in g["params"]]
            self._described[id(opt)] = {
                "type": type(opt).__name__,
                "groups": [{k: list(v) if isinstance(v, tuple) else v for k, v in g.items()} for g in groups],
                "params": sum(p.numel() for p in params),
                "dtypes": sorted({str(p.dtype).removeprefix("torch.") for p in params}),
                "roots": sorted({root for root, _ in self._sets.of_optimizer(opt).owners}),
            }
        # the lrs seen, also of an optimizer gone since its last description: a script's optimizer is freed with
        # its globals when it ends, before model.json is written the last time (the whole schedule goes in it)
        for key, described in self._described.items():
            if self._lr_at.get(key):
                described["lr_at"] = [list(p) for p in self._lr_at[key]]
        for key, note in self.notes.items():  # (also of an optimizer gone since its last description)
            if key in self._described:
                self._described[key].update(note)
        return list(self._described.values())

    def optimized_ids(self) -> set[int]:
        """id() of every parameter some live optimizer has."""
        return {id(p) for opt in list(self.optimizers) for g in opt.param_groups for p in g["params"]}


def _plain(v: Any) -> bool:
    """A hyperparameter model.json can hold: a number, flag or name, or a tuple of numbers (Adam's betas)."""
    if isinstance(v, tuple):
        return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
    return isinstance(v, (int, float, bool, str))


def optimizer_facts(described: list[dict[str, Any]], root: str) -> list[dict[str, Any]]:
    """The architecture facts of the optimizers that train the root model `root` (from `describe`): class, peak
    lr, betas or momentum, the weight decays of its groups, whether its schedule warms up (None: no lr read)."""
    out = []
    for d in described:
        if root not in d.get("roots", ()):
            continue
        groups = d.get("groups") or []
        lr_at = d.get("lr_at") or []
        lrs = [abs(v) for p in lr_at for v in p[1:]] or [abs(g["lr"]) for g in groups if _number(g.get("lr"))]
        fact: dict[str, Any] = {"type": d.get("type"), "lr": max(lrs) if lrs else None}
        for key in ("betas", "momentum"):
            if groups and key in groups[0]:
                fact[key] = groups[0][key]
        fact["weight_decay"] = sorted({g["weight_decay"] for g in groups if _number(g.get("weight_decay"))})
        fact["warmup"] = warms_up(lr_at) if lr_at else None
        out.append(fact)
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)

"""Wrong training settings, with no Kind of their own: a learning rate or weight decay the weights show to be
far too large, an optimizer told to climb the loss. The reasoner names each in the hypotheses it produced (see
reasoner.name_setting)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from neuraldbg_cli.reason.families.advice import _lr_above_usual, lower_lr, lower_lr_fix
from neuraldbg_cli.reason.families.context import Context, Event, _lr_history, _number
from neuraldbg_cli.reason.families.evidence import _evidence
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import EventType, Kind
from neuraldbg_cli.vocab import decoupled_decay


@dataclass
class SettingCause:
    """A training setting the weights show to be wrong. It has no Kind (the contract fixes the kinds): the
    hypotheses it produced carry it. The first of them (by tier, then onset) states it in its summary and
    ranks above the others; all of them get its fix as their first suggestion."""

    setting: str  # "learning_rate" | "weight_decay" | "update_sign"
    onset: int  # the step its evidence began
    statement: str  # "the learning rate is too large: ..."
    fix: str
    tiers: tuple[tuple[Kind, ...], ...]  # the kinds it produces, in the order they are chosen to name it
    evidence: list[dict[str, Any]] = field(default_factory=list)
    contradicts: tuple[str, ...] = ()  # suggestions containing one of these are dropped from what it produced
    ends: int | None = None  # the first step its evidence was seen to have ended at (None: it lasted)
    fixes: list[dict[str, Any]] = field(default_factory=list)  # `fix` as data (fixspec), first in what it produced
    # the harm began at `onset` however late its symptom shows (a weight decay pulls from its optimizer's first
    # step): the hypothesis that states it is dated there
    dates: bool = False

    @property
    def effects(self) -> set[Kind]:
        return set(chain.from_iterable(self.tiers))

    def in_force(self, step: int, slack: int, late: int) -> bool:
        """Whether it acted at `step`, the onset of an effect seen up to `late` steps after it began: a setting
        acts from its evidence (seen up to `slack` late) for as long as that lasts (an early transient, such as
        the first updates of a small output layer, explains nothing that began after it ended)."""
        return self.onset <= step + slack and (self.ends is None or step - late < self.ends)


def _ratio(e: Event) -> float | None:
    m = e.metrics
    value = next((m[k] for k in ("update_ratio", "ratio") if m.get(k) is not None), None)
    return float(value) if value is not None else None


def _rmsprop_start(ctx: Context, e: Event) -> bool:
    """An oversized update that RMSprop's start explains: torch's RMSprop has no bias correction, so its square
    average starts at (1 - alpha) g^2 and its first steps are 1/sqrt(1 - alpha^k) times the steady ones (10x at the
    first step, 3x by the tenth at alpha 0.99), whatever the lr. Judged at the steady size: the update ratio times
    sqrt(1 - alpha^k), k counted from step 0 (an optimizer created later has taken fewer steps, which would excuse
    more: this errs toward naming the lr)."""
    opts = [o for o in ctx.optimizers if e.root in (o.get("roots") or [e.root])]
    if not opts or not all(str(o.get("type")) == "RMSprop" for o in opts):
        return False
    alphas = [g.get("alpha") for o in opts for g in (o.get("groups") or [])]
    alpha = max((float(a) for a in alphas if _number(a)), default=0.99)
    ratio = _ratio(e)
    if ratio is None or not 0 < alpha < 1:
        return False
    return ratio * math.sqrt(1 - alpha ** (e.step + 1)) <= ctx.thresholds.update_oversized


def oversized_updates(ctx: Context) -> list[Event]:
    """The updates that were oversized against their weights, but for RMSprop's first steps (_rmsprop_start)."""
    evs = ctx.select(types=[EventType.parameter_update.value], to=["oversized"])
    return [e for e in evs if not _rmsprop_start(ctx, e)]


def learning_rate_setting(ctx: Context) -> SettingCause | None:
    """Updates far larger than the weights they change (update-to-weight ratio, healthy ~1e-3): the lr. The
    loss-level symptom it produced (divergence, oscillation, explosion) names it first; else the units it
    killed or saturated, or the NaN or plateau that followed. RMSprop's first steps are large by construction
    (_rmsprop_start): they name no lr."""
    evs = oversized_updates(ctx)
    if not evs:
        return None
    onset = min(e.step for e in evs)
    decay = weight_decay_setting(ctx)
    if decay is not None and onset + ctx.every >= decay.onset and not _lr_above_usual(ctx, onset):
        # weights shrinking under the decay change by a large fraction of their (vanishing) size each step:
        # that is the decay, which weight_decay_setting names first; an lr in its usual range is no cause
        return None
    if manual_ascent(ctx) is not None:
        return None  # an update that climbs makes the weights grow, and every step large against them: the sign
    falls = [e for e in ctx.select(to=["diverging"]) if e.metrics.get("fall_factor") is not None]
    falls += ctx.select(types=[EventType.loss_call_health.value], to=["negated"])
    if falls and not _lr_above_usual(ctx, onset):
        # a loss that falls without bound rewards growth (a term with the wrong sign): weights that grow with
        # it make every update large against them; an lr in its usual range is no cause (nor its cure)
        return None
    summed = ctx.select(types=[EventType.loop_health.value], to=["grads_not_zeroed"])
    if summed and min(e.step for e in summed) <= onset and not _lr_above_usual(ctx, onset):
        # gradients never zeroed: each update applies the sum of every gradient so far, which grows as an ever
        # larger lr would; the loop names itself (loop family), and an lr in its usual range is no cause
        return None
    ratios = [r for r in map(_ratio, evs) if r is not None]
    size = f"{100 * max(ratios):.3g}% of their size" if ratios else "a large fraction of their size"
    fix = next(iter(lower_lr(ctx, onset)), "lower the learning rate")
    damage = (
        Kind.dead_activation,
        Kind.saturated_activation,
        Kind.no_gradient,
        Kind.vanishing_gradient,
        Kind.residual_imbalance,  # branches and logits thrown out of scale by the oversized steps
        Kind.attention_collapse,
    )
    tiers: tuple[tuple[Kind, ...], ...]
    swings = _swings(ctx)
    if swings == "lasting":
        # the loss blows up or swings: that symptom, or the explosion that drives it, names the lr
        tiers = (
            (Kind.loss_divergence, Kind.unstable_loss, Kind.exploding_gradient),
            (Kind.non_finite, Kind.loss_plateau, *damage),
        )
    elif swings == "transient":  # a blow-up it fell back from: the stall, else the units it left dead, name it
        tiers = (
            (Kind.non_finite, Kind.loss_plateau),
            (Kind.dead_activation, Kind.saturated_activation, Kind.no_gradient, Kind.vanishing_gradient),
            (Kind.loss_divergence, Kind.exploding_gradient, Kind.residual_imbalance, Kind.attention_collapse),
        )
    else:  # the loss's own symptom (a NaN, a stall) names it; the network's damage follows
        tiers = ((Kind.non_finite, Kind.loss_plateau), (Kind.loss_divergence, Kind.exploding_gradient, *damage))
    return SettingCause(
        "learning_rate",
        onset,
        f"the learning rate is too large: each step changes the weights by {size} (healthy: about 0.1%)",
        fix,
        tiers,
        _evidence(evs, 3),
        # its own lr target goes first; the rules' targets quote the same lr from their own onsets
        contradicts=("raise the learning rate", *(("lr=",) if fix.startswith("lr=") else ())),
        ends=_last_in_force(ctx, evs, "oversized"),
        fixes=lower_lr_fix(ctx, onset),
    )


def _swings(ctx: Context) -> str:
    """How the loss blew up or swung: "lasting", "transient" (a blow-up that fell back within the loss window, a
    few steps, and was followed by a stall: dead units, a wrecked fit; the damage it left is what training shows,
    not the spike), or "" (it did neither)."""
    moves = sorted(ctx.select(types=[EventType.optimizer_instability.value]), key=lambda e: e.step)
    swung = ("diverging", "oscillating")
    if not any(e.to in swung for e in moves):
        return ""
    swinging, since, spent = False, 0, 0  # (spent: the steps the loss spent blowing up or swinging)
    for e in moves:
        if e.to in swung and not swinging:
            swinging, since = True, e.step
        elif e.to not in swung and swinging:
            swinging, spent = False, spent + e.step - since
    stalled = any(e.to == "plateau" for e in moves)
    return "lasting" if swinging or not stalled or spent >= ctx.loss_window else "transient"


def _last_in_force(ctx: Context, evs: list[Event], state: str) -> int | None:
    """The step by which every module had left `state` again (the last such transition); None while one
    stayed in it to the end."""
    left = {
        (e.root, e.module): e.step for e in ctx.select(types=[EventType.parameter_update.value]) if e.from_ == state
    }
    last: dict[tuple, int] = {}
    for e in evs:
        last[(e.root, e.module)] = e.step
    if any(key not in left or left[key] < step for key, step in last.items()):
        return None
    return max(left.values())


SHRUNK = 0.5  # weights below this fraction of their first norm: the decay has shrunk them


def weight_decay_setting(ctx: Context) -> SettingCause | None:
    """Weight norms shrinking toward 0 under a weight_decay large enough to do it (its per-step shrink
    lr*wd, or wd itself for Adam's L2 term): the network's output flattens, so the loss stops moving and
    the gradients fade or vanish. Short of a collapse, weights the decay shrank to under half their first norm
    whose updates are oversized against them are its doing too (normalised layers hold the loss up while their
    weights shrink, each step then moves them by a large fraction: the loss swings or climbs)."""
    evs = ctx.select(types=[EventType.parameter_update.value], to=["collapsing"])
    shrunk = False
    if not evs:
        evs = [
            e
            for e in ctx.select(types=[EventType.parameter_update.value], to=["oversized"])
            if _number(e.metrics.get("weight_ratio")) and float(e.metrics["weight_ratio"] or 1.0) < SHRUNK
        ]
        shrunk = True
    if not evs:
        return _decay_holds(ctx)
    th = ctx.thresholds
    large = []
    onset = min(e.step for e in evs)
    for opt, g, in_force in ctx.group_lrs(onset):  # the lr in force as they collapsed (a warm-up starts at ~0)
        wd = float(g["weight_decay"]) if _number(g.get("weight_decay")) else 0.0
        lr = abs(in_force or 0.0)
        if wd >= th.weight_decay_large or (wd > 0 and lr * wd >= th.weight_decay_shrink):
            large.append((wd, opt))
    if not large:
        return None
    wd, opt = max(large)
    began = onset
    # the decay pulls from its optimizer's first step: the shrink seen at `onset` accumulated since, and so may a
    # stall that began before it was seen (Adam's L2 at 1 holds a loss at chance from step 0, the weights are
    # under 5% of their start by step 500)
    first = _first_step(ctx, wd)
    dates = first < onset
    onset = min(onset, first)
    statement = (
        f"weight decay shrinks the weights: weight_decay={wd:g} with {opt} halves them by step {began}, so each "
        f"update is large against them"
        if shrunk
        else f"weight decay collapses the weights: weight_decay={wd:g} with {opt} shrinks them toward 0 (under "
        f"{th.weight_collapse_frac:.0%} of their first size from step {began})"
    )
    # a flat (or, under SGD's pull between the loss and the decay, climbing) loss is what the user sees; then
    # weights too small to pass a gradient on or to move; "no gradient" and dead units (a detach, a ReLU) are the
    # least direct readings
    tiers = (
        (Kind.loss_plateau, Kind.loss_divergence, Kind.unstable_loss),
        (Kind.vanishing_gradient, Kind.unchanged_weights, Kind.exploding_gradient),
        (Kind.no_gradient, Kind.dead_activation),
    )
    if dates:
        statement += f"; it pulls from its optimizer's first step, {onset}"
    cause = _decay_cause(wd, opt, onset, statement, tiers, _evidence(evs, 3))
    cause.dates = dates
    return cause


def _first_step(ctx: Context, wd: float) -> int:
    """The first step recorded of the optimizers with a group at weight_decay `wd` (model.json's lr_at: their lr
    is read from their first step); 0 when none was recorded."""
    firsts = []
    for o in ctx.optimizers:
        groups = [g for g in o.get("groups") or [] if isinstance(g, dict)]
        points = _lr_history(o.get("lr_at"), len(groups))
        if points and any(_number(g.get("weight_decay")) and float(g["weight_decay"]) == wd for g in groups):
            firsts.append(points[0][0])
    return int(min(firsts)) if firsts else 0


def _decay_cause(
    wd: float, opt: str, onset: int, statement: str, tiers: tuple[tuple[Kind, ...], ...], evidence: list[Any]
) -> SettingCause:
    """A weight_decay named as the cause: its fix (down to the usual range for the optimizer) and the advice it
    contradicts (a larger lr shrinks the weights faster: lr * weight_decay)."""
    text = f"lower weight_decay ({wd:g} with {opt}) to {_usual_decay(opt)}, the usual range for {opt}"
    return SettingCause(
        "weight_decay",
        onset,
        statement,
        text,
        tiers,
        evidence,
        fixes=[fix("weight_decay", text, value=0.01 if decoupled_decay(opt) else 1e-4)],
        contradicts=("raise the learning rate",),
    )


def _usual_decay(opt: str) -> str:
    return "0.01-0.1" if decoupled_decay(opt) else "1e-5-5e-4"


def _decay_holds(ctx: Context) -> SettingCause | None:
    """A loss that stalls under a weight_decay at or above weight_decay_large (whatever the lr: 3-4 orders above
    the usual range), while no weight shrinks: the decay pulls every weight toward 0 each step as hard as the loss
    pulls it toward a fit, so training stops at the balance of the two, above where the data would take it. Names
    the plateau (it makes no hypothesis of its own: a run whose loss does not stall is not judged)."""
    plateaus = ctx.select(types=[EventType.optimizer_instability.value], to=["plateau"])
    if not plateaus:
        return None
    onset = min(e.step for e in plateaus)
    large = [
        (float(g["weight_decay"]), opt)
        for opt, g, _ in ctx.group_lrs(onset)
        if _number(g.get("weight_decay")) and float(g["weight_decay"]) >= ctx.thresholds.weight_decay_large
    ]
    if not large:
        return None
    wd, opt = max(large)
    statement = (
        f"weight decay holds the weights back: weight_decay={wd:g} with {opt} (usual: {_usual_decay(opt)}) pulls "
        "every weight toward 0 each step as hard as the loss pulls it toward a fit, so training stops where the two "
        "balance"
    )
    tiers = ((Kind.loss_plateau,), (Kind.unchanged_weights, Kind.vanishing_gradient))
    return _decay_cause(wd, opt, onset, statement, tiers, [])  # (the plateau's own evidence is what it rests on)


def ascent_setting(ctx: Context) -> SettingCause | None:
    """An optimizer built with maximize=True steps up its gradient: the value backward() is called on climbs, and
    no step size changes the direction (a lower lr only slows the climb). Named on a loss that rises (diverges or
    swings upward), never on one that falls: a reward maximised on purpose rises as it should only when its
    script logs it as what it is, and then it is no loss the monitor reads as diverging. Without an optimizer,
    the script's own update is measured: one that moves the weights along their gradient is the same climb."""
    manual = manual_ascent(ctx)
    if manual is not None:
        return manual
    rising = [
        e
        for e in ctx.select(types=[EventType.optimizer_instability.value], to=["diverging"])
        if e.metrics.get("fall_factor") is None
    ]
    if not rising:
        return None
    onset = min(e.step for e in rising)
    up = [opt for opt, g, _ in ctx.group_lrs(onset) if g.get("maximize") is True]
    if not up:
        return None
    opt = up[0]
    text = f"remove maximize=True from {opt}(...): it steps up the gradient, so the loss climbs"
    return SettingCause(
        "update_sign",
        onset,
        f"the optimizer climbs the loss: {opt} was built with maximize=True, so each step goes up the gradient",
        text,
        (
            (Kind.loss_divergence, Kind.unstable_loss, Kind.exploding_gradient),
            (Kind.non_finite, Kind.loss_plateau, Kind.dead_activation, Kind.saturated_activation),
        ),
        [],  # (the loss's own evidence is what it rests on)
        # (a lower lr only slows the climb: no step size turns an ascent into a descent)
        contradicts=("check the update sign", "lr="),
        fixes=[fix("minimize", text)],
    )


def manual_ascent(ctx: Context) -> SettingCause | None:
    """The script updates the weights itself (no optimizer) and each update moves them along the gradient it
    followed (the cosine of the change with the gradient near +1 on most matrix layers, where `p -= lr * p.grad`
    gives -1): the update's sign is flipped, and the loss climbs whatever the step size. From the first sampled
    updates: a flipped sign climbs from the start, while a descent with momentum can run on up a gradient that
    turned (a ravine it overshoots, later in a run whose steps are too large)."""
    evs = ctx.select(types=[EventType.parameter_update.value], to=["ascending"])
    if not evs or ctx.optimizers:
        return None
    onset = min(e.step for e in evs)
    if onset >= max(ctx.every, 1):
        return None
    cos = [float(v) for e in evs if isinstance(v := e.metrics.get("update_cos"), float) and math.isfinite(v)]
    layers = sorted({e.module or "" for e in evs})
    shown = ", ".join(layers[:4]) + ("…" if len(layers) > 4 else "")
    text = (
        "make the manual update subtract the gradient: `p -= lr * p.grad` (or `p.data -= lr * p.grad`), not `+=`; "
        "or use torch.optim.SGD, which does"
    )
    return SettingCause(
        "update_sign",
        onset,
        f"the manual update climbs the loss: it moves the weights of {shown} along their gradient (cosine "
        f"{min(cos, default=1.0):+.2f} or more between each sampled update and its gradient, where a descent gives "
        "-1), so the update adds the gradient instead of subtracting it",
        text,
        (
            (Kind.loss_divergence, Kind.unstable_loss, Kind.exploding_gradient),
            (Kind.non_finite, Kind.loss_plateau, Kind.dead_activation, Kind.saturated_activation),
        ),
        _evidence(evs[:3]),
        # (a smaller step only slows the climb; the flipped sign is the check the generic advice asks for)
        contradicts=("check the update sign", "lr=", "step size smaller", "clip gradients"),
    )


SETTINGS: tuple[Callable[[Context], SettingCause | None], ...] = (
    ascent_setting,
    learning_rate_setting,
    weight_decay_setting,
)

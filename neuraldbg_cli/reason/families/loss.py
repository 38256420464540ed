"""Loss: each loss series (one per model trained) is normal, on a plateau, diverging, oscillating or
non-finite, judged by its LossSeries (loss_model.py)."""

from __future__ import annotations

import math
import statistics
from operator import attrgetter
from typing import Any

from neuraldbg_cli.reason.families.activations import _blowup_phrase, _blowups
from neuraldbg_cli.reason.families.advice import (
    lower_lr,
    lower_lr_fix,
    plateau_lr,
    plateau_lr_fix,
    postln_warmup,
    postln_warmup_fix,
)
from neuraldbg_cli.reason.families.base import NON_FINITE, Board, Family, Observer, settled
from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.families.evidence import _evidence, _hyp
from neuraldbg_cli.reason.families.loss_model import DIVERGING, NORMAL, LossSeries
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind, StepRecord
from neuraldbg_cli.vocab import SOFTMAX_TYPES

CLASS_LOSSES = ("cross_entropy", "nll_loss")  # losses over a class dim whose uniform guess scores ln(classes)
PRIOR_LABELS = 64  # labels counted before their entropy stands for the labels' frequencies
ETYPE = EventType.optimizer_instability.value


class LossObserver(Observer):
    """Per step: each loss the step reported, fed to its series; the summary's losses come from the first."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.series: dict[str, LossSeries] = {}
        self.main_series: LossSeries | None = None  # the first series seen: the run summary's losses
        self.prev_active: set[str] = set()
        self.losses_seen = 0
        self.last_loss: float | None = None
        self.counts: dict[str, list[float]] = {}  # series -> its class loss's labels per class, so far

    def observe(self, rec: StepRecord) -> None:
        if rec.active:
            if self.prev_active and rec.active.isdisjoint(self.prev_active):
                self._reset_loss(rec.active)  # another model took over: its loss curve starts afresh
            if rec.active != self.prev_active:  # (a copy: the record's set is the probe's)
                self.prev_active = set(rec.active)
        losses = rec.losses or ({"": rec.loss} if rec.loss is not None else {})
        for name, loss in losses.items():
            self._observe_loss(rec.step, name, loss, alone=len(losses) == 1)
        if len(losses) == 1 and rec.loss_calls:
            self._chance_level(rec, next(iter(losses)))

    def _chance_level(self, rec: StepRecord, name: str) -> None:
        """A step whose one loss is one class loss over C classes, averaged: that loss's chance level is
        ln(C) (see LossSeries._worse_than_guessing). Several loss calls in the step: none is known to be it."""
        series = self.series.get(name)
        calls = list(rec.loss_calls.values())
        if series is None or len(calls) != 1:
            return
        call = calls[0]
        # not a binary cross-entropy: its chance level, ln 2, can lie within a few percent of what the best model
        # of hard data scores (click-through rates: 0.50 against 0.69), so learning cannot be told from it
        if call.name in CLASS_LOSSES and call.reduction == "mean" and (call.classes or 0) >= 2:
            series.chance = math.log(call.classes or 2)
            if call.counts is not None:  # the labels' own frequencies so far: their entropy (see LossSeries.prior)
                seen = self.counts.setdefault(name, [0.0] * len(call.counts))
                if len(seen) == len(call.counts):
                    seen[:] = [a + b for a, b in zip(seen, call.counts)]
                    total = sum(seen)
                    if total >= PRIOR_LABELS:
                        series.prior = -sum(c / total * math.log(c / total) for c in seen if c > 0)

    def _reset_loss(self, active: set[str]) -> None:
        """Loss series of models no longer trained are dropped: a new model's curve starts afresh."""
        for name in [n for n in self.series if n not in active]:
            del self.series[name]
            self.board.reset(("loss", name), NORMAL)

    def _observe_loss(self, step: int, name: str, loss: float, alone: bool) -> None:
        key = ("loss", name)
        self.last_loss = loss
        if not math.isfinite(loss):
            self.board.feed(key, NORMAL, NON_FINITE, step, {"loss": loss}, ETYPE, "loss", name, None)
            return
        self.losses_seen += 1
        series = self.series.get(name)
        if series is None:
            series = self.series[name] = LossSeries(self.th)
            if self.main_series is None:
                self.main_series = series
        series.alone = series.alone and alone
        state, onset = series.observe(step, loss)
        if settled(self.board.machines, key, state):
            return  # nothing changes (most steps): no evidence to build
        # a state dated back (a rise's change point, a plateau's stretch) begins no earlier than the last one
        onset = max(0, onset, self.board.since.get(key, 0))
        self.board.feed(key, NORMAL, state, onset, series.metrics(), ETYPE, "loss", name, None)

    def floor(self, now: int) -> int:
        """A loss state is dated back (a rise's change point, a plateau's stretch, an oscillation's window):
        the earliest step any series could still date one at."""
        floor = now
        for name, s in self.series.items():
            machine = self.board.machines.get(("loss", name))
            floor = min(floor, s.earliest_onset(now, machine is not None and machine.state == DIVERGING))
        return floor

    def summary(self) -> dict[str, Any]:
        main = self.main_series
        return {
            "losses": float(self.losses_seen),
            "first_loss": statistics.median(main.first) if main and main.first else None,
            "start_loss": main._start if main and main.first else None,  # what LossSeries judges from
            # 0: the first series is a game's payoff (a GAN's G or D, reported in the same steps as another),
            # which is not expected to fall: whether it fell says nothing of training's health
            "alone": float(main.alone) if main else None,
            "best_loss": main._x(main.best) if main and math.isfinite(main.best) else None,
            "last_loss": self.last_loss,
            # where the run ended: the mean of the main series' latest window, the expected loss training
            # minimises (a loss swinging between 0 and 1e7 ends on 0 by chance, and its median is 0 too)
            "late_loss": statistics.fmean(v for _, v in list(main.hist)[-self.th.loss_window :])
            if main and main.hist
            else None,
        }


# ---------------------------------------------------------------- rules


def _loss_persistence(ctx: Context, evs: list[Event], state: str, intermittent: bool) -> float:
    """Confidence factor for a loss state: 1 when it lasts to the end (or turned non-finite, which is worse).
    A state that ended is history, not a present problem: below the 0.5 that --fail-on reads, unless an
    intermittent state (an oscillation comes and goes) took most of the run after its onset, or the loss
    came out of it onto a plateau (a blow-up that wrecked the progress: the plateau is its consequence)."""
    end = max((e.step for e in ctx.select(types=[EventType.run_summary.value])), default=None)
    shares = []
    for key in {(e.type, e.root, e.module, e.site) for e in evs}:
        if ctx.last_to(key) in (state, "non_finite") or (state != "plateau" and ctx.last_to(key) == "plateau"):
            shares.append(1.0)  # still there, worse, or over but the loss never won back its progress (stuck)
            continue
        moves = sorted(
            (e for e in ctx.select(types=[key[0]]) if (e.type, e.root, e.module, e.site) == key), key=attrgetter("step")
        )
        inside, since, onset = 0, None, None
        for e in moves:
            if e.to == state and since is None:
                since = e.step
                onset = e.step if onset is None else onset
            elif e.to != state and since is not None:
                inside, since = inside + e.step - since, None
        last = end if end is not None else (moves[-1].step if moves else 0)
        span = max(1, last - (onset or 0))
        shares.append(min(1.0, inside / span))
    share = max(shares, default=0.0)
    since = min(e.step for e in evs)
    if share >= 1.0 or (state in ("diverging", "oscillating") and _lasting_damage(ctx, since, _ended(ctx, evs, state))):
        return 1.0
    if intermittent and share >= 0.5:
        return 0.65 + 0.35 * share
    return min(0.6, 0.5 + 0.1 * share)  # base <= 0.8: at most 0.48


LASTING = ("vanishing", "saturated", "dead", "swamping", "dead_branch", "stream_growth", "collapsed")


def _lasting_damage(ctx: Context, since: int, ended: int | None = None) -> bool:
    """Whether units or gradients went dead, saturated or vanishing while the loss blew up or swung (from
    `since` until it `ended`, within a sampling interval) and stayed so, or the structure the blow-up threw
    out of scale stayed so (a residual branch swamping or gone from its skip, a stream grown block after
    block, attention rows collapsed to one key): a blow-up of the loss that left such damage is over, but its
    harm is not (the weights it wrecked stay wrecked). Damage that began after the loss had recovered is not
    its doing: a first-step overshoot the run recovered from stays a transient."""
    until = None if ended is None else ended + ctx.every
    for e in ctx.select(to=LASTING):
        if since <= e.step and (until is None or e.step <= until):
            if ctx.last_to((e.type, e.root, e.module, e.site)) == e.to:
                return True
    return False


def _ended(ctx: Context, evs: list[Event], state: str) -> int | None:
    """The step the loss first left `state` after its onset (None: it never did)."""
    sites = {(e.type, e.root, e.module, e.site) for e in evs}
    since = min(e.step for e in evs)
    left = [
        e.step
        for e in ctx.select(types=[EventType.optimizer_instability.value])
        if (e.type, e.root, e.module, e.site) in sites and e.from_ == state and e.step >= since
    ]
    return min(left, default=None)


def _loss_rule(
    ctx: Context,
    state: str,
    kind: Kind,
    base: float,
    phrase: str,
    tips: list[str],
    intermittent: bool = False,
    fixes: list[dict[str, Any]] | None = None,
) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.optimizer_instability.value], to=[state])
    if not evs:
        return None
    first = min(evs, key=lambda e: e.step)
    m = {k: v for k, v in first.metrics.items() if v is not None}
    conf = base * _loss_persistence(ctx, evs, state, intermittent)
    if intermittent and "low" in m and "high" in m:
        summary = (
            f"{phrase} from step {first.step}: it swings between {m['low']:.4g} and {m['high']:.4g} "
            f"step to step (started at {m.get('start', 0):.4g})."
        )
    else:
        summary = (
            f"{phrase} from step {first.step}: loss {m.get('recent', m.get('loss', 0)):.4g} now vs "
            f"{m.get('start', 0):.4g} at the start (best {m.get('best', 0):.4g})."
        )
        if "prior" in m:  # held at the labels' entropy (LossSeries.at_prior)
            summary = summary[:-1] + (
                f", no better than predicting each class at its frequency: the labels' entropy, {m['prior']:.4g}, is "
                "what a model that ignores its inputs scores, and the loss sits there."
            )
        elif "chance" in m:  # it fell from a blow-up at initialisation to guessing (LossSeries.reference)
            classes = round(math.exp(m["chance"]))
            guess = "0.5 for every target" if classes == 2 else f"each of the {classes} classes equally likely"
            summary = summary[:-1] + (
                f", no better than chance: ln({classes}) = {m['chance']:.4g} is what predicting {guess} "
                f"scores, so its fall from the start is no learning."
            )
    return _hyp(kind, conf, None, first.step, summary, evs, tips, fixes=fixes)


def _onset(ctx: Context, state: str) -> int | None:
    """The first step the loss entered `state` (the lr advice quotes the lr in force then)."""
    return min((e.step for e in ctx.select(types=[EventType.optimizer_instability.value], to=[state])), default=None)


def loss_plateau(ctx: Context) -> Hypothesis | None:
    types = ctx.module_types()
    tips = postln_warmup(ctx) + plateau_lr(ctx, _onset(ctx, "plateau"))  # the lr in force as it stalled
    ordered = [n for m in ctx.models for n in (m.get("order") or [])]
    if ordered and types.get(ordered[-1]) in SOFTMAX_TYPES:
        tips.insert(
            0,
            f"the model ends in {types[ordered[-1]]} ({ordered[-1]}): nn.CrossEntropyLoss applies "
            f"log-softmax itself; return raw logits",
        )
    unpaired = not tips and _only_the_loss(ctx)
    if unpaired:
        tips.append(PAIRING_TIP)
    tips.append("check that the loss can decrease at all: overfit one small batch first")
    at = _onset(ctx, "plateau")
    fixes = postln_warmup_fix(ctx) + plateau_lr_fix(ctx, at)
    h = _loss_rule(ctx, "plateau", Kind.loss_plateau, 0.72, "The loss does not decrease", tips, fixes=fixes)
    guessing = _at_chance(ctx)
    if h is not None and unpaired and guessing is not None:
        h.summary += (
            f"{guessing} Nothing else is wrong in the network (gradients reach every layer, the steps are in scale, "
            "no unit is dead or saturated): what reaches its head carries nothing about the label, as when inputs "
            "and labels are shuffled apart, or the head reads a position every sample shares (an RNN's first "
            "step instead of its last)."
        )
    elif h is not None and unpaired:  # a plateau below chance: a model that learned something, from its inputs
        h.suggestions = [t for t in h.suggestions if t != PAIRING_TIP]
    return h


def _at_chance(ctx: Context) -> str | None:
    """Words for a class loss whose plateau sits at guessing (None: not one): its summary says so already when it
    fell to chance from above, else it stalled within CHANCE_BAND of ln(C) (the labels' own entropy, when the
    classes are not balanced, is a little below ln(C))."""
    evs = ctx.select(types=[EventType.optimizer_instability.value], to=["plateau"])
    if not evs:
        return None
    m = min(evs, key=lambda e: e.step).metrics
    if m.get("chance") is not None or m.get("prior") is not None:
        return ""
    level, chance = m.get("recent"), m.get("chance_level")
    if not isinstance(level, float) or not isinstance(chance, float) or not level >= CHANCE_BAND * chance:
        return None
    classes = round(math.exp(chance))
    return f" That is guessing: ln({classes}) = {chance:.4g} is what predicting each class equally likely scores."


CHANCE_BAND = 0.9  # a class loss above this fraction of ln(C) learned nothing from its inputs


PAIRING_TIP = (
    "check that each input keeps its own label: shuffle inputs and labels with one permutation "
    "(idx = torch.randperm(n); x, y = x[idx], y[idx]) or shuffle a Dataset of (x, y) pairs; check that the labels "
    "come from the right column or file, that the inputs differ from sample to sample, and that the head reads "
    "what differs (an RNN's output at the last step, outputs[-1] or the final hidden state, not outputs[0])"
)


def _only_the_loss(ctx: Context) -> bool:
    """The trace shows nothing but the loss: no gradient, activation, weight, data or loss-call finding."""
    quiet = {EventType.optimizer_instability.value, EventType.run_summary.value}
    return all(e.type in quiet for e in ctx.events)


def loss_divergence(ctx: Context) -> Hypothesis | None:
    at = _onset(ctx, "diverging")
    tips = lower_lr(ctx, at) + [
        "clip gradients (clip_grad_norm_)",
        "check the update sign (maximize=True, a negative lr, loss sign)",
    ]
    evs = ctx.select(types=[EventType.optimizer_instability.value], to=["diverging"])
    falls = [e for e in evs if e.metrics.get("fall_factor") is not None]
    if falls and min(falls, key=lambda e: e.step) is min(evs, key=lambda e: e.step):
        # a loss unbounded below: no learning rate cures a sign error, the loss's terms are the fix
        tips = [
            "check the sign of each loss term: a KL term is added, KLD = -0.5 * sum(1 + logvar - mu^2 - "
            "exp(logvar)) >= 0; a term subtracted by mistake (or a loss that rewards unbounded outputs, e.g. "
            "-output.mean()) has no lower bound",
            *tips,
        ]
        h = _loss_rule(
            ctx,
            "diverging",
            Kind.loss_divergence,
            0.8,
            "The loss falls without bound (a sign error such as a subtracted KL term, or a loss that rewards "
            "unbounded outputs)",
            tips,
            fixes=[],  # no lr or clipping cures a sign error: nothing to apply from outside the script
        )
        if h is not None:
            m = falls[0].metrics
            h.summary += f" It fell to {m.get('fall_factor') or 0:.3g}x its start's size below zero."
    else:
        fixes = lower_lr_fix(ctx, at) + [fix("clip_grad_norm", tips[-2], max_norm=1.0)]
        h = _loss_rule(
            ctx,
            "diverging",
            Kind.loss_divergence,
            0.8,
            "The loss diverges (rises far above its best)",
            tips,
            fixes=fixes,
        )
        if h is not None:
            h.summary += _where_it_ended(ctx, min(evs, key=lambda e: e.step).metrics)
    blow = _blowups(ctx)
    if h is not None and blow:  # the forward pass shows where values grew first (the origin stays the loss)
        h.summary += f" In the forward pass, {_blowup_phrase(ctx, blow)[1]}."
        h.evidence = (h.evidence + _evidence(blow, 3))[:8]
    return h


def _where_it_ended(ctx: Context, m: dict[str, Any]) -> str:
    """How the run ended against the rise: still climbing, or levelled off above its best (a blow-up that then
    went flat is not a loss that keeps growing)."""
    summaries = ctx.select(types=[EventType.run_summary.value])
    last = summaries[-1].metrics.get("last_loss") if summaries else None
    best, recent = m.get("best"), m.get("recent")
    if not isinstance(last, float) or not math.isfinite(last) or best is None or recent is None or last <= best:
        return ""
    if last > recent:
        return f" It kept rising: {last:.4g} at the end."
    return f" It then levelled off, ending at {last:.4g}: still above its best."


def unstable_loss(ctx: Context) -> Hypothesis | None:
    at = _onset(ctx, "oscillating")
    tips = lower_lr(ctx, at) + ["add learning-rate warm-up or a decaying schedule", "use a larger batch"]
    fixes = lower_lr_fix(ctx, at) + [fix("warmup", tips[-2], steps=50)]
    return _loss_rule(
        ctx,
        "oscillating",
        Kind.unstable_loss,
        0.66,
        "The loss oscillates without converging",
        tips,
        intermittent=True,
        fixes=fixes,
    )


FAMILY = Family("loss", LossObserver, (loss_plateau, loss_divergence, unstable_loss))

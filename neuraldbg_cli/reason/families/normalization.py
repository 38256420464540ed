"""Normalisation layers: a BatchNorm in eval mode while its model trains, running statistics poisoned by a
non-finite batch, too few values per channel to estimate batch statistics, a momentum written in another
framework's convention.

Why each is a fault (and when the same reading is healthy):
- eval mode: the layer normalises with its running statistics instead of the batch's, and never updates them.
  Healthy when it is meant: its parameters frozen (detection/segmentation fine-tunes, FrozenBatchNorm), or
  running statistics that still describe the data (pretrained statistics frozen on purpose: mmdetection's
  `norm_eval`). A fault when they do not: still exactly at their initial 0/1 (the layer never ran in training
  mode) or far from the batch's (median over channels |mu_b - mu_r| / sigma_r or |ln var_b / var_r|).
- non-finite running statistics: lasting damage; every eval-mode forward afterwards is NaN, whatever the
  training loss says (a script that skips a NaN loss trains on).
- few values per channel: batch statistics of a handful of values are noise (a per-rank batch under DDP
  without SyncBatchNorm, BatchNorm1d at batch 2). GroupNorm/LayerNorm do not depend on the batch.
- momentum >= 0.5: PyTorch's momentum is the weight of the new batch (default 0.1); 0.9/0.99 is Keras'
  convention (the weight of the old average), so the running statistics follow the last batch alone.
- drift: in training mode the batch statistics stay far from the running ones (beyond what an i.i.d. batch of
  that size can explain), for several time constants of the running average after it forgot its start. Eval
  mode normalises with the running statistics, which then fit no training batch: validation is much worse than
  training. Batches unlike each other do it (data sorted by class, sources preprocessed differently in turn);
  so do running statistics that lag (a tiny momentum). A layer called several times a step (a GAN's real and
  fake batches, multi-crop views) averages different inputs by design and is not judged.
- gain collapse / growth: the gain's RMS against its own first value (a zero-initialised gain, as in ResNet's
  zero_init_residual, has none and is the residual family's): below norm_gain_collapse and falling (too strong
  a penalty or decay on norm gains; a decay that shrinks the whole model is the weights family's), or above
  norm_gain_growth and still rising."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.base import NON_FINITE, Board, Family, Observer, _finite, _runs_floor, settled
from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.families.evidence import _first_by_module, _hyp, _still
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind, NormState, NormStats, StepRecord

S = NormState
ETYPE = EventType.normalization_health.value
SITE = "norm"
FAULTS = (
    S.poisoned.value,
    S.eval_mode.value,
    S.few_values.value,
    S.momentum.value,
    S.gain_collapse.value,
    S.gain_growth.value,
    S.drift.value,  # last: weights that move fast (a gain collapsing upstream) make running statistics lag
)
# the states as plain strings (judged per layer per sampled step: an Enum's `.value` is a descriptor call)
DRIFT, EVAL_MODE, FEW_VALUES, GAIN_COLLAPSE, GAIN_GROWTH, MOMENTUM, NORMAL, POISONED = (
    S.drift.value,
    S.eval_mode.value,
    S.few_values.value,
    S.gain_collapse.value,
    S.gain_growth.value,
    S.momentum.value,
    S.normal.value,
    S.poisoned.value,
)
DEFAULT_MOMENTUM = 0.1  # PyTorch's; also the time scale judged for a cumulative average (momentum=None)


def classify_norm(ns: NormStats, trains: bool, th: Thresholds) -> str:
    """trains: the layer's parameters are trainable and an optimizer holds them (its model takes steps)."""
    if ns.running_finite == 0.0:
        return POISONED  # debounced like the rest: once poisoned they stay so
    if not ns.training:
        drifted = (ns.shift is not None and ns.shift > th.norm_eval_shift) or (
            ns.log_scale is not None and ns.log_scale > th.norm_eval_log_scale
        )
        if trains and (ns.running_initial == 1.0 or drifted):
            return EVAL_MODE
        return NORMAL
    if 0 < ns.per_channel < th.norm_min_values:
        return FEW_VALUES
    if ns.momentum is not None and ns.momentum >= th.norm_momentum_max:
        return MOMENTUM
    return NORMAL


def drift_level(ns: NormStats, th: Thresholds) -> float | None:
    """How far a training batch's statistics sit from the running ones, in units of the drift limit (> 1:
    beyond it); None when not judged: not in training mode, called several times in the step (the running
    statistics average different inputs by design), or running statistics that still remember their start.
    The limit is norm_drift_noise times what an i.i.d. batch of this size can explain, at least the floors."""
    if not ns.training or ns.calls != 1 or not (_finite(ns.shift) and _finite(ns.log_scale)) or ns.batch < 2:
        return None
    m = ns.momentum if ns.momentum is not None and 0 < ns.momentum < 1 else DEFAULT_MOMENTUM
    if ns.tracked is None or ns.tracked < math.log(th.norm_drift_memory) / math.log(1 - m):
        return None
    shift_limit = max(th.norm_drift_noise / math.sqrt(ns.batch), th.norm_drift_shift)
    scale_limit = max(th.norm_drift_noise * math.sqrt(2 / ns.batch), th.norm_drift_log_scale)
    return max(ns.shift / shift_limit, ns.log_scale / scale_limit)


def drift_span(momentum: float | None, th: Thresholds) -> float:
    """Steps a drift must hold: norm_drift_memories time constants (1/momentum steps) of the running average."""
    m = momentum if momentum is not None and 0 < momentum < 1 else DEFAULT_MOMENTUM
    return th.norm_drift_memories / m


def classify_gain(gain: float, first: float | None, past: float | None, keeps: bool, th: Thresholds) -> str:
    """Pure. gain: its RMS now; first: at its first sample; past: norm_gain_window samples before (None: fewer
    so far); keeps: it is already collapsing (a collapsed gain jitters around 0: it need not fall further). A
    gain is judged on its trend too: one that settled low over a long training is where it learnt to be."""
    if not _finite(gain) or first is None or not first > 0 or past is None:
        return NORMAL
    ratio = gain / first
    if ratio < th.norm_gain_collapse and (keeps or gain * th.norm_gain_rise < past):
        return GAIN_COLLAPSE
    if ratio > th.norm_gain_growth and gain > th.norm_gain_rise * past:
        return GAIN_GROWTH
    return NORMAL


class NormObserver(Observer):
    """Per sampled step: each normalisation layer the probes read (BatchNorm running statistics, gains)."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.gains: dict[tuple[str, str], deque[float]] = {}  # (root, module) -> its latest gain RMS
        self.first_gain: dict[tuple[str, str], float] = {}
        self.drift_since: dict[tuple[str, str], int] = {}  # (root, module) -> first step of its run above the limit

    def observe(self, rec: StepRecord) -> None:
        for (root, name), ns in rec.norms.items():
            if rec.active is not None and root not in rec.active:
                continue
            model = self.board.models.get(root)
            info = model.modules.get(name) if model else None
            trains = ns.trainable and bool(info and info.in_optimizer)
            key = ("norm", root, name)
            state, at = classify_norm(ns, trains, self.th), rec.step
            first, past = self._gain(root, name, ns.gain_rms)
            if state == NORMAL and ns.gain_rms is not None and trains:
                machine = self.board.machines.get(key)
                keeps = machine is not None and GAIN_COLLAPSE in (machine.state, machine.cand)
                state = classify_gain(ns.gain_rms, first, past, keeps, self.th)
            level = drift_level(ns, self.th)
            if state == NORMAL and level is not None and level > 1:
                since = self.drift_since.setdefault((root, name), rec.step)
                if rec.step - since >= drift_span(ns.momentum, self.th):
                    state, at = DRIFT, since  # dated where the run began (see floor)
            else:
                self.drift_since.pop((root, name), None)
            if settled(self.board.machines, key, state):
                continue  # nothing changes (most layers): no evidence to build
            metrics = {
                "training": float(ns.training),
                "trainable": float(ns.trainable),
                "per_channel": float(ns.per_channel) if ns.per_channel else None,
                "batch": float(ns.batch) if ns.batch else None,
                "calls": float(ns.calls),
                "momentum": ns.momentum,
                "running_finite": ns.running_finite,
                "running_initial": ns.running_initial,
                "shift": ns.shift,
                "log_scale": ns.log_scale,
                "drift": level,
                "gain_rms": ns.gain_rms,
                "first_gain_rms": first,
                "past_gain_rms": past,
            }
            self.board.feed(key, NORMAL, state, at, metrics, ETYPE, SITE, root, name)

    def _gain(self, root: str, name: str, gain: float | None) -> tuple[float | None, float | None]:
        """The gain's first value and its value norm_gain_window samples before (recorded after reading)."""
        if gain is None or not _finite(gain):
            return self.first_gain.get((root, name)), None
        first = self.first_gain.setdefault((root, name), gain)
        hist = self.gains.setdefault((root, name), deque(maxlen=self.th.norm_gain_window))
        past = hist[0] if len(hist) == self.th.norm_gain_window else None
        hist.append(gain)
        return first, past

    def floor(self, now: int) -> int:
        """A drift is dated back to where its run above the limit began (see observe)."""
        return _runs_floor(self.board, "norm", self.drift_since, DRIFT, now)


# ---------------------------------------------------------------- rule


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:3])}{'…' if len(names) > 3 else ''}"


def _poisoned(ctx: Context, evs: list[Event]) -> tuple[int, str, list[str]]:
    """Onset, sentence and advice for non-finite running statistics; dated to the non-finite batch (checked
    every step) that went through the layer, when one was seen up to the step they were found at."""
    first = min(e.step for e in evs)
    data = [
        e
        for e in ctx.select(types=[EventType.data_anomaly.value], to=[NON_FINITE])
        if e.step <= first and first - e.step <= ctx.every
    ]
    onset = max((e.step for e in data), default=first)
    names = sorted({e.module or "" for e in evs})
    batch = f" by the non-finite {data[-1].site} batch of step {onset}" if data else ""
    summary = (
        f"BatchNorm running statistics of {_listed(names)} turned NaN/Inf{batch} (seen at step {first}): "
        f"lasting damage, every eval-mode forward (validation, inference, the saved checkpoint) is NaN "
        f"from then on, whatever the training loss shows."
    )
    tips = [
        "reset and recompute them: for each BatchNorm call m.reset_running_stats(), then run a few clean "
        "batches through the model in train() mode under torch.no_grad() (or reload the last good checkpoint)",
        "guard the data before the forward (skip a batch when not torch.isfinite(x).all()): skipping the NaN "
        "loss after it is too late, the forward already updated the running statistics",
    ]
    return onset, summary, tips


class _Finding(NamedTuple):
    """What the rule says about the layers in one state."""

    summary: str
    tips: list[str]
    confidence: float
    fixes: list[dict] | None = None


def _eval_mode(m: dict, names: list[str], step: int, persistent: float) -> _Finding:
    why = (
        "running statistics never updated (still 0 and 1: it never ran in training mode)"
        if m.get("running_initial") == 1.0
        else f"running statistics far from the batch's (median shift {m.get('shift') or 0:.3g} σ, "
        f"|ln var ratio| {m.get('log_scale') or 0:.3g})"
    )
    summary = (
        f"BatchNorm in eval mode while the model trains: {_listed(names)} normalise with frozen "
        f"statistics from step {step}, {why}; {len(names)} layer(s)."
    )
    tips = [
        "call model.train() before the training steps (after each validation pass that called model.eval())",
        "to freeze BatchNorm on purpose, also freeze its parameters (requires_grad_(False)) or use FrozenBatchNorm2d",
    ]
    conf = min(0.95, 0.7 + 0.05 * min(len(names), 3)) * (0.6 + 0.4 * persistent)
    return _Finding(summary, tips, conf, [fix("bn_train_mode", tips[0])])


def _few_values(m: dict, names: list[str], step: int, persistent: float) -> _Finding:
    summary = (
        f"Too few values per channel for batch statistics: {_listed(names)} normalise each channel over "
        f"{int(m.get('per_channel') or 0)} value(s) per batch from step {step}, so their statistics are mostly noise."
    )
    tips = [
        "use GroupNorm or LayerNorm (independent of the batch size), or a larger batch",
        "under DistributedDataParallel with a small per-GPU batch: "
        "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)",
    ]
    return _Finding(summary, tips, 0.6 * (0.7 + 0.3 * persistent))


def _momentum(m: dict, names: list[str], step: int, persistent: float) -> _Finding:
    momentum = m.get("momentum") or 0.0
    summary = (
        f"BatchNorm momentum={momentum:g} in {_listed(names)}: in PyTorch momentum is the weight of the new "
        f"batch, so the running statistics follow the last batch alone (0.9/0.99 is another framework's convention)."
    )
    return _Finding(summary, [f"use momentum={1 - momentum:.2g} (PyTorch's default is 0.1)"], 0.55)


def _drift(m: dict, names: list[str], step: int, persistent: float) -> _Finding:
    batch, momentum = int(m.get("batch") or 0), m.get("momentum")
    noise = f" (an i.i.d. batch of {batch}: about {0.67 / math.sqrt(batch):.2g})" if batch else ""
    summary = (
        f"BatchNorm running statistics disagree with the training batches: from step {step} the batch means of "
        f"{_listed(names)} sit {m.get('shift') or 0:.2g} running σ from the running means{noise}, "
        f"|ln var ratio| {m.get('log_scale') or 0:.2g}, and stay so; eval mode (validation, inference) normalises "
        f"with statistics that fit no training batch, so evaluation can be far worse than training."
    )
    if momentum is None or momentum < 0.01:
        what = "a cumulative average (momentum=None)" if momentum is None else f"momentum={momentum:g}"
        tips = [f"{what} makes the running statistics lag the moving weights: use momentum=0.1 (the default)"]
    else:
        tips = [
            "make every batch a sample of the whole training set: shuffle (DataLoader(shuffle=True)) data "
            "stored in order (by class, by source), and mix sources within each batch instead of alternating "
            "them; check that every source gets the same preprocessing (normalisation, scale)",
        ]
    tips.append(
        "before evaluating, recompute the running statistics on shuffled training data "
        "(torch.optim.swa_utils.update_bn(loader, model)); or use GroupNorm/LayerNorm, which have none"
    )
    conf = min(0.8, 0.6 + 0.05 * min(len(names), 3)) * (0.6 + 0.4 * persistent)
    return _Finding(summary, tips, conf)


def _gain(m: dict, names: list[str], step: int, persistent: float, collapse: bool) -> _Finding:
    gain, first = m.get("gain_rms") or 0.0, m.get("first_gain_rms") or 0.0
    how = "collapsed toward 0" if collapse else "grows without bound"
    summary = (
        f"Normalisation gain {how} in {_listed(names)}: the weight of {names[0]} has RMS {gain:.3g} at step "
        f"{step}, {gain / first if first else 0:.2g}x its first value {first:.3g}, and is still "
        + ("falling: the layer passes almost no signal" if collapse else "rising")
        + f"; {len(names)} layer(s)."
    )
    if collapse:
        tips = [
            "a penalty or weight decay on the normalisation gains is too strong: put norm weights and biases in a "
            "param group with weight_decay=0 (the decay/no-decay split), and lower an L1 sparsity penalty on "
            "BatchNorm gains (network slimming: about 1e-5 to 1e-4)",
        ]
    else:
        tips = [
            "the gain is pushed up step after step: lower the learning rate of the norm parameters, or check "
            "for a negative weight_decay or a loss term that rewards scale",
        ]
    return _Finding(summary, tips, 0.65 * (0.6 + 0.4 * persistent))


FINDINGS: dict[str, Callable[[dict, list[str], int, float], _Finding]] = {
    S.eval_mode.value: _eval_mode,
    S.few_values.value: _few_values,
    S.momentum.value: _momentum,
    S.drift.value: _drift,
    S.gain_collapse.value: partial(_gain, collapse=True),
    S.gain_growth.value: partial(_gain, collapse=False),
}


def normalization_fault(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[ETYPE], to=FAULTS)
    if ctx.select(types=[EventType.parameter_update.value], to=["collapsing"]):
        # the model's weights collapse as well: a decay shrinks everything, its gains too (weight_decay_setting)
        evs = [e for e in evs if e.to != S.gain_collapse.value]
    if not evs:
        return None
    state = next(s for s in FAULTS if any(e.to == s for e in evs))
    picked = [e for e in evs if e.to == state]
    first = _first_by_module(picked)
    origin = min(first.values(), key=lambda e: (e.step, ctx.order(e)))
    names = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    if state == S.poisoned.value:
        onset, summary, tips = _poisoned(ctx, picked)
        return _hyp(Kind.normalization_fault, 0.9, origin, onset, summary, picked, tips, names)
    found = FINDINGS[state](origin.metrics, names, origin.step, _still(ctx, picked, state))
    return _hyp(
        Kind.normalization_fault,
        found.confidence,
        origin,
        origin.step,
        found.summary,
        picked,
        found.tips,
        names,
        found.fixes,
    )


FAMILY = Family("normalization", NormObserver, (normalization_fault,))

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
  convention (the weight of the old average), so the running statistics follow the last batch alone."""

from __future__ import annotations

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import EventType, Hypothesis, Kind, NormState, NormStats, StepRecord
from neuraldbg_cli.families.base import NON_FINITE, Context, Event, Family, Observer, _first_by_module, _hyp, _still
from neuraldbg_cli.fixspec import fix

ETYPE = EventType.normalization_health.value
SITE = "norm"
FAULTS = (NormState.poisoned.value, NormState.eval_mode.value, NormState.few_values.value, NormState.momentum.value)


def classify_norm(ns: NormStats, trains: bool, th: Thresholds) -> str:
    """trains: the layer's parameters are trainable and an optimizer holds them (its model takes steps)."""
    if ns.running_finite == 0.0:
        return NormState.poisoned.value  # debounced like the rest: once poisoned they stay so
    if not ns.training:
        drifted = (ns.shift is not None and ns.shift > th.norm_eval_shift) or (
            ns.log_scale is not None and ns.log_scale > th.norm_eval_log_scale
        )
        if trains and (ns.running_initial == 1.0 or drifted):
            return NormState.eval_mode.value
        return NormState.normal.value
    if 0 < ns.per_channel < th.norm_min_values:
        return NormState.few_values.value
    if ns.momentum is not None and ns.momentum >= th.norm_momentum_max:
        return NormState.momentum.value
    return NormState.normal.value


class NormObserver(Observer):
    """Per sampled step: each normalisation layer the probes read (BatchNorm running statistics, gains)."""

    def observe(self, rec: StepRecord) -> None:
        for (root, name), ns in rec.norms.items():
            if rec.active is not None and root not in rec.active:
                continue
            model = self.board.models.get(root)
            info = model.modules.get(name) if model else None
            trains = ns.trainable and bool(info and info.in_optimizer)
            state = classify_norm(ns, trains, self.th)
            metrics = {
                "training": float(ns.training),
                "trainable": float(ns.trainable),
                "per_channel": float(ns.per_channel) if ns.per_channel else None,
                "momentum": ns.momentum,
                "running_finite": ns.running_finite,
                "running_initial": ns.running_initial,
                "shift": ns.shift,
                "log_scale": ns.log_scale,
                "gain_rms": ns.gain_rms,
            }
            self.board.feed(
                ("norm", root, name), NormState.normal.value, state, rec.step, metrics, ETYPE, SITE, root, name
            )


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


def normalization_fault(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[ETYPE], to=FAULTS)
    if not evs:
        return None
    by_state = {s: [e for e in evs if e.to == s] for s in FAULTS}
    state = next(s for s in FAULTS if by_state[s])
    picked = by_state[state]
    first = _first_by_module(picked)
    origin = min(first.values(), key=lambda e: (e.step, ctx.order(e)))
    names = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    persistent = _still(ctx, picked, state)
    m = origin.metrics
    if state == NormState.poisoned.value:
        onset, summary, tips = _poisoned(ctx, picked)
        return _hyp(Kind.normalization_fault, 0.9, origin, onset, summary, picked, tips, names)
    if state == NormState.eval_mode.value:
        why = (
            "running statistics never updated (still 0 and 1: it never ran in training mode)"
            if m.get("running_initial") == 1.0
            else f"running statistics far from the batch's (median shift {m.get('shift') or 0:.3g} σ, "
            f"|ln var ratio| {m.get('log_scale') or 0:.3g})"
        )
        summary = (
            f"BatchNorm in eval mode while the model trains: {_listed(names)} normalise with frozen "
            f"statistics from step {origin.step}, {why}; {len(first)} layer(s)."
        )
        tips = [
            "call model.train() before the training steps (after each validation pass that called model.eval())",
            "to freeze BatchNorm on purpose, also freeze its parameters (requires_grad_(False)) or use FrozenBatchNorm2d",
        ]
        conf = min(0.95, 0.7 + 0.05 * min(len(first), 3)) * (0.6 + 0.4 * persistent)
        fixes = [fix("bn_train_mode", tips[0])]
        return _hyp(Kind.normalization_fault, conf, origin, origin.step, summary, picked, tips, names, fixes)
    if state == NormState.few_values.value:
        n = int(m.get("per_channel") or 0)
        summary = (
            f"Too few values per channel for batch statistics: {_listed(names)} normalise each channel over "
            f"{n} value(s) per batch from step {origin.step}, so their statistics are mostly noise."
        )
        tips = [
            "use GroupNorm or LayerNorm (independent of the batch size), or a larger batch",
            "under DistributedDataParallel with a small per-GPU batch: "
            "torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)",
        ]
        return _hyp(
            Kind.normalization_fault, 0.6 * (0.7 + 0.3 * persistent), origin, origin.step, summary, picked, tips, names
        )
    momentum = m.get("momentum") or 0.0
    summary = (
        f"BatchNorm momentum={momentum:g} in {_listed(names)}: in PyTorch momentum is the weight of the new "
        f"batch, so the running statistics follow the last batch alone (0.9/0.99 is another framework's convention)."
    )
    tips = [f"use momentum={1 - momentum:.2g} (PyTorch's default is 0.1)"]
    return _hyp(Kind.normalization_fault, 0.55, origin, origin.step, summary, picked, tips, names)


FAMILY = Family("normalization", NormObserver, (normalization_fault,))

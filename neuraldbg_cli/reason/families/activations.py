"""Activations: a module's output is normal, dead (ReLU units that never fire), saturated (bounded units
pinned at their rails), anomalous (its scale blew up from its early level) or non-finite."""

from __future__ import annotations

import math
import statistics
from typing import Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.advice import _lr_above_usual, lower_lr, lower_lr_fix, reinit_fix
from neuraldbg_cli.reason.families.base import NON_FINITE, Board, Family, Observer, settled
from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.families.evidence import (
    _first_by_module,
    _hyp,
    _model_has,
    _origin_of,
    _site_name,
    _spread_confidence,
    _still,
)
from neuraldbg_cli.reason.families.settings import oversized_updates
from neuraldbg_cli.reason.fixspec import fix
from neuraldbg_cli.trace.events import ActState, ActStats, EventType, Hypothesis, Kind, StepRecord
from neuraldbg_cli.vocab import SATURATING_TYPES, is_norm

ETYPE = EventType.activation_regime_shift.value
# the states as plain strings (classified per site per sampled step: an Enum's `.value` is a descriptor call)
NORMAL, DEAD, SATURATED, ANOMALOUS = (
    ActState.normal.value,
    ActState.dead.value,
    ActState.saturated.value,
    ActState.anomalous.value,
)


def classify_activation(s: ActStats, baseline_std: float | None, th: Thresholds, output_layer: bool = False) -> str:
    """output_layer: the model's last layer, whose units are its outputs (logits): a dead one can never fire,
    and their scale grows by orders of magnitude as a classifier grows confident (from a near-0 init)."""
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return NON_FINITE
    relu_like = s.min >= 0 and s.zero_frac >= th.relu_zero_frac  # exact zeros: a ReLU's output, not a sigmoid's
    # a unit "never active over the batch" is dead only when the batch gave it enough values to fire on
    # (per_unit 0: not measured, judged as before)
    enough = not s.per_unit or s.per_unit >= th.dead_min_per_unit
    if relu_like and enough and s.dead_frac >= (th.dead_output_frac if output_layer else th.dead_frac):
        return DEAD
    sat = (
        0.0
        if relu_like
        else s.sat01
        if (s.min >= 0 and s.max <= 1)
        else s.sat11
        if (s.min >= -1 and s.max <= 1)
        else 0.0
    )
    if sat >= th.saturated_frac:
        return SATURATED
    growth = th.anomalous_output_growth if output_layer else th.anomalous_growth
    if baseline_std and s.std > growth * baseline_std:
        return ANOMALOUS
    return NORMAL


class ActivationObserver(Observer):
    """Per step: each module's output statistics (the input, targets and loss are other families' sites)."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.act_base: dict[tuple, list[float]] = {}
        self.baselines: dict[tuple, float] = {}  # key -> median of its full act_base (it stops growing then)
        self.late: set[str] = set()  # roots with a layer that died or saturated after a normal start (see summary)

    def observe(self, rec: StepRecord) -> None:
        outputs: dict[str, str | None] = {}  # root -> its output layer, read once per step
        machines, n_base = self.board.machines, self.th.baseline_samples
        for (root, module, site), s in rec.acts.items():
            if site in ("input", "target", "loss"):
                continue
            key = ("act", root, module, site)
            if not isinstance(s, ActStats):
                if not math.isfinite(s):
                    self.board.feed(key, NORMAL, NON_FINITE, rec.step, {"sum": s}, ETYPE, site, root, module)
                continue
            baseline = self.baselines.get(key)
            if baseline is None:  # a full act_base no longer grows: its median is the baseline
                base = self.act_base.setdefault(key, [])
                if len(base) >= n_base:
                    baseline = self.baselines[key] = statistics.median(base)
            if root not in outputs:
                outputs[root] = self._output_layer(root)
            state = classify_activation(s, baseline, self.th, output_layer=module == outputs[root])
            if baseline is None and state == NORMAL and len(base) < n_base and s.std > 0:
                base.append(s.std)
            if settled(machines, key, state):
                continue  # nothing changes (most sites): no evidence to build
            metrics = {
                "mean": s.mean,
                "std": s.std,
                "min": s.min,
                "max": s.max,
                "zero_frac": s.zero_frac,
                "dead_frac": s.dead_frac,
                "sat_frac": max(s.sat01, s.sat11) if s.max <= 1 else 0.0,
                "nonfinite": s.nonfinite,
            }
            if baseline:  # the metric that moved, for an activation blow-up
                metrics.update(baseline_std=baseline, std_ratio=s.std / baseline)
                if state in (SATURATED, DEAD):  # after a normal start: where its loss stood then (see summary)
                    level = self.board.losses.now(root)
                    if level is not None:
                        metrics["loss_at"] = level
                        self.late.add(root)
            self.board.feed(key, NORMAL, state, rec.step, metrics, ETYPE, site, root, module)

    def summary(self) -> dict[str, Any]:
        """Per root that had a layer die or saturate after a normal start, its loss level at the end
        (`loss_now.ROOT`): the rules compare it with the level when that began (the event's `loss_at`)."""
        out: dict[str, Any] = {}
        for root in sorted(self.late):
            level = self.board.losses.now(root)
            if level is not None:
                out[f"loss_now.{root}"] = level
        return out

    def _output_layer(self, root: str) -> str | None:
        model = self.board.models.get(root)
        if model is None:
            return None
        layers = [n for n in model.order if n in model.modules and model.modules[n].params]
        return layers[-1] if layers else None


# ---------------------------------------------------------------- rules


def _blowups(ctx: Context) -> list[Event]:
    """Activation magnitude blow-ups: a module's output std up by orders of magnitude from its early level
    (the monitor's `anomalous` state) to a size no healthy layer has (Thresholds.blowup_std)."""
    least = ctx.thresholds.blowup_std
    return [
        e
        for e in ctx.select(types=[EventType.activation_regime_shift.value], to=["anomalous"])
        if (e.metrics.get("std") or 0.0) >= least
    ]


def _blowup_phrase(ctx: Context, evs: list[Event]) -> tuple[Event, str]:
    """The first module where activations blew up (earliest step, then forward order) and a sentence on it."""
    origin = _origin_of(ctx, list(_first_by_module(evs).values()))
    m = origin.metrics
    ratio = m.get("std_ratio")
    if ratio is None and m.get("std") is not None and m.get("baseline_std"):
        ratio = m["std"] / m["baseline_std"]  # type: ignore[operator]
    size = f" (output std {m['std']:.3g}, {ratio:.3g}× its early level)" if m.get("std") is not None and ratio else ""
    n = len(_first_by_module(evs))
    return origin, (f"activations blow up at {_site_name(origin)} from step {origin.step}{size}; {n} layer(s) affected")


def _activation_rule(
    ctx: Context,
    state: str,
    kind: Kind,
    base: float,
    tips: list[str],
    phrase: str,
    fixes: list[dict[str, Any]] | None = None,
    evs: list[Event] | None = None,
) -> Hypothesis | None:
    if evs is None:
        evs = ctx.select(types=[EventType.activation_regime_shift.value], to=[state])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(base, len(first), _still(ctx, evs, state))
    where = " (its activation output)" if origin.site == "activation" else ""
    summary = f"{phrase} at {_site_name(origin)}{where} from step {origin.step}; {len(first)} layer(s) affected."
    return _hyp(kind, conf, origin, origin.step, summary, evs, tips, chain, fixes)


def dead_activation(ctx: Context) -> Hypothesis | None:
    tips = [
        "use LeakyReLU/GELU, or lower the learning rate so ReLUs are not pushed into the dead zone",
        "check bias initialisation (large negative biases keep units off) and use He init",
    ]
    # a large lr is the usual way units die during training: its fix first when the lr is above its range
    evs = ctx.select(types=[EventType.activation_regime_shift.value], to=["dead"])
    first = min(evs, key=lambda e: (e.step, ctx.order(e)), default=None)
    at = first.step if first is not None else None
    if evs and all(ctx.output_side(e.root, e.module) for e in evs):
        return _dead_output(ctx, evs)
    if first is not None and at == 0:  # dead before any update could act: the init or the data, not the learning
        # rate (verify refutes a smaller lr there: units already dead are not revived by a smaller step)
        tips = ["use LeakyReLU/GELU (a dead ReLU unit gets no gradient to recover with)", tips[1]]
        fixes: list = reinit_fix(ctx, first, tips[1], init="kaiming")
    else:
        tips = lower_lr(ctx, at) + tips if _lr_above_usual(ctx, at) else tips[:1] + lower_lr(ctx, at) + tips[1:]
        fixes = lower_lr_fix(ctx, at)
    phrase = "Most ReLU units never activate on a whole batch (dead)"
    hyp = _activation_rule(ctx, "dead", Kind.dead_activation, 0.62, tips, phrase, fixes, evs)
    learned = bool(evs) and all(_learned(ctx, e) is not None for e in evs)
    if hyp is not None and learned and not _lr_above_usual(ctx, at) and not oversized_updates(ctx):
        # every layer died after a normal start, under steps in scale, and the loss kept improving after it: the
        # units left alive carry the learning (an over-wide layer on easy data). Units that died while the loss
        # stalled, or under steps out of scale (the lr's damage), are harm
        _excuse(ctx, hyp, evs, "died", "the units left alive carry the learning, training is not harmed: a note")
    return hyp


def _excuse(ctx: Context, hyp: Hypothesis, evs: list[Event], what: str, verdict: str) -> None:
    """A layer state the model learned through: below the 0.5 that --fail-on reads, with the loss it reached."""
    first = min(evs, key=lambda e: (e.step, ctx.order(e)))
    at, now = _learned(ctx, first) or (0.0, 0.0)
    hyp.confidence = round(hyp.confidence * LEARNED_FACTOR, 3)
    hyp.summary += (
        f" Each {what} after a normal start, and the loss kept improving after it ({at:.4g} -> {now:.4g} from "
        f"step {first.step}): {verdict}."
    )


OUTPUT_RELU_TIP = (
    "remove the ReLU after the model's last layer: return its raw output (logits can be negative; the loss applies "
    "the softmax or sigmoid it needs), or use an activation that passes a gradient below 0 if the output must be "
    "positive (softplus)"
)


def _dead_output(ctx: Context, evs: list[Event]) -> Hypothesis | None:
    """Dead ReLU units at the model's output (a Sequential of repeated Linear/ReLU pairs whose last ReLU was kept):
    every output the loss pushes below 0 is clamped to 0 and passes no gradient back, so it stays dead whatever the
    learning rate; a lower one only delays it. The cure is the model's last activation, which verify can drop."""
    tips = [OUTPUT_RELU_TIP]
    hyp = _activation_rule(
        ctx,
        "dead",
        Kind.dead_activation,
        0.62,
        tips,
        "Most ReLU units never activate on a whole batch (dead)",
        [fix("drop_output_relu", OUTPUT_RELU_TIP)],
        evs,
    )
    if hyp is not None:
        hyp.summary += (
            " They are the model's output: a ReLU after its last layer clamps every output the loss pushes below 0 "
            "to 0 and passes no gradient back, so those outputs stay dead whatever the learning rate."
        )
    return hyp


def saturated_activation(ctx: Context) -> Hypothesis | None:
    """Saturated bounded units. At a model's output (its final Sigmoid/Tanh) they are the output itself: a
    classifier that is sure, or a loss that pushes it to a rail; swapping the activation (ReLU) would change
    what the model outputs, so the advice there is about the loss and the balance of training."""
    evs = ctx.select(types=[EventType.activation_regime_shift.value], to=["saturated"])
    fixes: list[dict[str, Any]] = []
    if evs and all(ctx.output_side(e.root, e.module) for e in evs):
        tips = [
            "the model's output activation is pinned at its rails (outputs ~0/1): return logits and use "
            "nn.BCEWithLogitsLoss / nn.CrossEntropyLoss, and check the loss and the targets it is trained on",
            "when it is a discriminator or critic trained against another model: it wins outright; balance the "
            "two (its learning rate, its updates per step), and label smoothing or spectral norm",
        ]
    else:
        tips = ["normalise the inputs and use a smaller (Xavier) initialisation so pre-activations stay near 0"]
        tips.append(
            "switch to ReLU/GELU"
            if _model_has(ctx, is_norm)
            else "add BatchNorm/LayerNorm before the activation, or switch to ReLU/GELU"
        )
        hidden = [e for e in evs if not ctx.output_side(e.root, e.module)]
        if hidden:  # saturated from step 0: the init's scale (or the inputs') before any update
            fixes = reinit_fix(ctx, min(hidden, key=lambda e: (e.step, ctx.order(e))), tips[0], "xavier", "large")
        if _model_has(ctx, SATURATING_TYPES.__contains__):
            fixes.append(fix("activation_swap", tips[-1], to="ReLU"))
    phrase = "Bounded activations are pinned at their rails (saturated, gradient ≈ 0)"
    stalled = [e for e in evs if _learned(ctx, e) is None]
    if stalled or not evs:
        return _activation_rule(ctx, "saturated", Kind.saturated_activation, 0.62, tips, phrase, fixes, stalled)
    # every saturation began after a normal start and the loss kept improving after it: the model grew
    # confident (bounded units driven to their rails by what it learned), training did not stall; kept, weak
    hyp = _activation_rule(ctx, "saturated", Kind.saturated_activation, 0.62, tips, phrase, fixes, evs)
    if hyp is not None:
        _excuse(ctx, hyp, evs, "began", "saturation the model learned its way into, not a stall")
    return hyp


LEARNED_FACTOR = 0.5  # a layer state training went on improving through: below the 0.5 that --fail-on reads


def _learned(ctx: Context, e: Event) -> tuple[float, float] | None:
    """(loss level when the layer died or saturated, at the end) when that happened after a normal start (its
    event carries `loss_at`, see ActivationObserver) and its model's loss then improved by at least
    fade_loss_gain of its level: bounded units the model drove to their rails as it grew confident (an additive
    attention's tanh energies, a gate that learned to open), ReLU units an over-wide layer left behind. A state
    that stalls training leaves the loss where it was; one from the first step is the init's or the inputs' scale
    and is never excused."""
    at = e.metrics.get("loss_at")
    if at is None or not math.isfinite(at):
        return None
    summaries = list(reversed(ctx.select(types=[EventType.run_summary.value])))
    now = next(
        (s.metrics[f"loss_now.{e.root}"] for s in summaries if s.metrics.get(f"loss_now.{e.root}") is not None), None
    )
    if now is None:
        return None
    gain = ctx.thresholds.fade_loss_gain * abs(at)
    if at - now > gain:
        return at, now
    # the run's best level lies well below the level at the death, and the run did not end above that level: the
    # loss went on learning after it and ended in the noise of a converged fit (a small net's MSE on 20 points
    # wanders between its best and a little above). A death while the loss rose, or one it stalled at, fails one
    best = next((s.metrics["best_loss"] for s in summaries if s.metrics.get("best_loss") is not None), None)
    alone = any(s.metrics.get("alone") == 1.0 for s in summaries)  # one loss series: the best is this model's
    if alone and best is not None and math.isfinite(best) and at - best > gain and now <= at + gain:
        return at, now
    return None


FAMILY = Family("activations", ActivationObserver, (dead_activation, saturated_activation))

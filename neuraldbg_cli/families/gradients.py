"""Gradients: a module's gradient RMS is healthy, vanishing, exploding, absent or non-finite.

Judged per step on every model that trained in it, each matrix layer against the largest of its model (and,
in a repeated stack, against the same layer in the other blocks)."""

from __future__ import annotations

import math
import re
import statistics

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import EventType, GradState, Hypothesis, Kind, ModelInfo, StepRecord
from neuraldbg_cli.families.activations import _blowup_phrase, _blowups
from neuraldbg_cli.families.advice import lower_lr, lower_lr_fix
from neuraldbg_cli.families.base import (
    Board,
    Context,
    Family,
    Observer,
    _finite,
    _first_by_module,
    _hyp,
    _model_has,
    _names,
    _origin_of,
    _spread_confidence,
    _still,
)
from neuraldbg_cli.fixspec import fix
from neuraldbg_cli.vocab import RNN_TYPES, SATURATING_TYPES, is_norm, is_residual

_DIGITS = re.compile(r"\d+")  # block numbers in module names


def classify_gradient(
    rms: float | None,
    ref_max: float,
    baseline: float | None,
    matrix: bool,
    depth: int,
    th: Thresholds,
    ahead: float | None = None,
) -> str:
    """rms: this module's gradient RMS (None: no gradient). ref_max: the largest over matrix layers of the same
    model; depth: how many of them have a gradient.
    ahead: the largest RMS of the same layer in the other blocks of a repeated stack (see GradientObserver._ahead)."""
    if rms is None or rms == 0.0:
        return GradState.absent.value
    if not math.isfinite(rms):
        return GradState.non_finite.value
    if rms > th.explode_abs or (baseline and rms > th.explode_growth * baseline):
        return GradState.exploding.value
    if matrix and (
        rms < th.vanish_abs
        or (
            depth >= th.vanish_min_layers
            and rms < th.vanish_ratio * ref_max
            and (ahead is None or rms < th.vanish_context_ratio * ahead)
        )
    ):
        return GradState.vanishing.value
    return GradState.healthy.value


class GradientObserver(Observer):
    """Per step, per model trained in it: each module's gradient RMS, classified and fed to its machine."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.grad_base: dict[tuple, list[float]] = {}
        self.got_grad: set[tuple] = set()

    def observe(self, rec: StepRecord) -> None:
        for root, model in self.board.models.items():
            if rec.active is not None and root not in rec.active:
                continue  # a model not used this step (trained earlier, or not yet): its .grad is stale
            rms: dict[str, float | None] = {}
            for name, info in model.modules.items():
                if info.params == 0:
                    continue
                gs = rec.grads.get((root, name))
                if gs is None or gs.norm is None:
                    if rec.sampled:
                        rms[name] = None
                    continue
                rms[name] = gs.norm / math.sqrt(info.params) if math.isfinite(gs.norm) else gs.norm
            matrix = [v for n, v in rms.items() if model.modules[n].weight_ndim2 and _finite(v) and v > 0]
            ref_max = max(matrix, default=0.0)
            ref_median = statistics.median(matrix) if matrix else 0.0
            ahead = self._ahead(model, rms)
            for name, value in rms.items():
                self._judge_gradient(rec, model, root, name, value, ref_max, ref_median, len(matrix), ahead.get(name))

    def _ahead(self, model: ModelInfo, rms: dict[str, float | None]) -> dict[str, float]:
        """Per matrix layer that repeats (the same name with other block numbers: `layer.0.attention.query`,
        `layer.5.attention.query`), the largest gradient RMS among its repeats. A gradient vanishing toward
        the input leaves a block's layer far below the same layer deeper in the stack; a layer that is small
        in every block is small by design (attention query/key at initialisation), not vanishing."""
        groups: dict[str, list[str]] = {}
        for n, v in rms.items():
            if model.modules[n].weight_ndim2 and _finite(v):
                groups.setdefault(_DIGITS.sub("#", n), []).append(n)
        out: dict[str, float] = {}
        for names in groups.values():
            if len(names) >= 2:
                top = max(rms[n] for n in names)  # type: ignore[type-var]
                out.update((n, top) for n in names)  # type: ignore[misc]
        return out

    def _judge_gradient(
        self,
        rec: StepRecord,
        model: ModelInfo,
        root: str,
        name: str,
        value: float | None,
        ref_max: float,
        ref_median: float,
        depth: int,
        ahead: float | None = None,
    ) -> None:
        info = model.modules[name]
        key = ("grad", root, name)
        if _finite(value) and value > 0:
            self.got_grad.update(((root, name), (root, None)))  # (root, None): some part of this model trains
            self.board.grad_since[(root, name)] = max(value, self.board.grad_since.get((root, name), 0.0))
        if value is None and not (info.in_optimizer or (root, None) in self.got_grad):
            return  # not meant to train: no optimizer holds it and no part of its model gets gradients (an EMA
            # copy or a teacher called with gradients on)
        base = self.grad_base.setdefault(key, [])
        baseline = statistics.median(base) if len(base) >= self.th.baseline_samples else None
        state = classify_gradient(value, ref_max, baseline, info.weight_ndim2, depth, self.th, ahead)
        # the baseline that growth is measured against: the layer's own early scale, once it is on the scale of
        # its model's layers. A factor that starts at exactly 0 or ~1e-6 by construction (LoRA's A while B is 0,
        # a zero-initialised branch or gate) grows by orders of magnitude to a normal size: not an explosion
        peers = ref_median * self.th.baseline_peer_ratio
        if state == GradState.healthy.value and len(base) < self.th.baseline_samples and value and value >= peers:
            base.append(value)
        machine = self.board.machines.get(key)
        if machine is not None and machine.state == state and machine.cand is None:
            return  # nothing changes (most module-steps): skip building the evidence
        metrics = {
            "rms": value,
            "ratio_to_max": (value / ref_max) if _finite(value) and ref_max else None,
            "ratio_to_median": (value / ref_median) if _finite(value) and ref_median else None,
            "baseline_rms": baseline,
        }
        self.board.feed(
            key,
            GradState.healthy.value,
            state,
            rec.step,
            metrics,
            EventType.gradient_health_transition.value,
            "gradient",
            root,
            name,
        )


# ---------------------------------------------------------------- rules


def vanishing_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["vanishing"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))
    chain = [e.module or "" for e in sorted(first.values(), key=ctx.order, reverse=True)]
    conf = _spread_confidence(0.62, len(first), _still(ctx, evs, "vanishing"))
    ratio = origin.metrics.get("ratio_to_max")
    types = ctx.module_types()
    sat = sorted(n for n, t in types.items() if t in SATURATING_TYPES)
    tips = []
    fixes = []
    if sat:
        kinds = "/".join(sorted({types[n] for n in sat}))
        tips.append(
            f"{kinds} activations ({', '.join(sat[:3])}{'…' if len(sat) > 3 else ''}) have derivative "
            f"<= 0.25 (sigmoid) or saturate: switch to ReLU/GELU"
        )
        fixes.append(fix("activation_swap", tips[-1], to="ReLU"))
    elif ctx.select(to=["saturated"]):
        tips.append("saturating functional activations (torch.sigmoid/tanh) squash gradients: switch to ReLU/GELU")
    if any(t in RNN_TYPES for t in types.values()):
        tips.append("plain RNN over long sequences: use LSTM/GRU, shorter truncated BPTT, or attention")
    tips.append("initialise with Xavier/He (nn.init.kaiming_normal_ for ReLU, xavier_uniform_ for tanh)")
    if not _model_has(ctx, is_norm):  # suggestions fit the model that was seen
        tips.append("add normalisation (LayerNorm/BatchNorm) between layers")
    if len(types) >= 8 and not _model_has(ctx, is_residual):
        tips.append("add residual (skip) connections so gradients reach the first layers")
    where = f"{ratio:.1e}× the largest layer's gradient" if ratio else "almost no gradient"
    summary = (
        f"Gradients vanish toward the input: {origin.module} gets {where} from step {origin.step}; "
        f"{len(first)} layer(s) affected, so the early layers barely learn."
    )
    return _hyp(Kind.vanishing_gradient, conf, origin, origin.step, summary, evs, tips, chain, fixes)


def exploding_gradient(ctx: Context) -> Hypothesis | None:
    """Exploding gradients; without gradient events, an activation blow-up is the same failure seen in the
    forward pass (weights grown, by a large lr or init, until every layer multiplies its input up), so it
    stands for it unless the loss diverges, which then carries it as evidence."""
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["exploding"])
    blow = _blowups(ctx)
    tips = lower_lr(ctx) + [
        "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0) before optimizer.step()",
        "check the initialisation scale (default or Xavier/He, not larger)",
    ]
    fixes = lower_lr_fix(ctx) + [fix("clip_grad_norm", tips[-2], max_norm=1.0)]
    if not evs:
        if not blow or ctx.select(types=[EventType.optimizer_instability.value], to=["diverging"]):
            return None
        origin, phrase = _blowup_phrase(ctx, blow)
        first = _first_by_module(blow)
        chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
        conf = _spread_confidence(0.62, len(first), _still(ctx, blow, "anomalous"))
        summary = f"Values explode in the forward pass: {phrase}."
        return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, blow, tips, chain, fixes)
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()))  # input side: where large init / high lr compounds most
    chain = [e.module or "" for e in sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))]
    conf = _spread_confidence(0.66, len(first), max(_still(ctx, evs, "exploding"), 0.7))
    rms = origin.metrics.get("rms")
    summary = (
        f"Gradients explode: {origin.module} reaches gradient RMS {rms:.3g} at step {origin.step}"
        if rms
        else f"Gradients explode from step {origin.step} at {origin.module}"
    )
    summary += f"; {len(first)} layer(s) affected."
    if blow:
        summary += f" Also {_blowup_phrase(ctx, blow)[1]}."
    return _hyp(Kind.exploding_gradient, conf, origin, origin.step, summary, evs + blow, tips, chain, fixes)


def no_gradient(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.gradient_health_transition.value], to=["absent"])
    if not evs:
        return None
    first = _first_by_module(evs)
    origin = _origin_of(ctx, list(first.values()), output_side=True)
    names = _names(evs)
    tips = [
        "look for .detach(), .data, .item() or torch.no_grad() on the path from these parameters to the loss",
        "check that the module's output is actually used in the loss (not overwritten or multiplied by 0)",
    ]
    listed = f"{', '.join(names[:4])}{'…' if len(names) > 4 else ''}"
    # a gradient that comes back was not cut off (detach, no_grad): whole layers whose activations saturate
    # or die under a wild optimizer lose it now and then; that is a symptom, ranked below its cause
    back = {
        (e.root, e.module)
        for e in ctx.select(types=[EventType.gradient_health_transition.value])
        if e.from_ == "absent"
    } & set(first)
    if back:
        summary = (
            f"{listed} lose their gradient (.grad exactly zero or None) from step {origin.step}, "
            f"and get it back now and then."
        )
    else:
        summary = f"{listed} never receive a gradient (.grad stays None or zero) from step {origin.step}."
    conf = _spread_confidence(0.66, len(first), _still(ctx, evs, "absent")) * (1 - 0.5 * len(back) / len(first))
    return _hyp(Kind.no_gradient, conf, origin, origin.step, summary, evs, tips, names)


FAMILY = Family("gradients", GradientObserver, (vanishing_gradient, exploding_gradient, no_gradient))

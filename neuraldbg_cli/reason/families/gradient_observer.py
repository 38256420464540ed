"""Gradients, observe side: a module's gradient RMS is healthy, vanishing, exploding, absent or non-finite.

Judged per step on every model that trained in it, each matrix layer against the largest of its model (and,
in a repeated stack, against the same layer in the other blocks), and each model's whole gradient norm
against its own early level (ModelFade). The family's rules, what these states mean and what to change, are
in gradients.py (the family's module); this is what they read, measured."""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.base import Board, Observer, _finite, settled
from neuraldbg_cli.trace.events import EventType, GradState, ModelInfo, ModuleInfo, StepRecord

_DIGITS = re.compile(r"\d+")  # block numbers in module names
INF = math.inf
FADE_SITE = "model_gradient"  # the site of a whole model's gradient fading over time (see ModelFade)
ETYPE = EventType.gradient_health_transition.value
# the states as plain strings: read per layer per step, where an Enum's `.value` is a descriptor call
HEALTHY, VANISHING, EXPLODING, NON_FINITE, ABSENT = (
    GradState.healthy.value,
    GradState.vanishing.value,
    GradState.exploding.value,
    GradState.non_finite.value,
    GradState.absent.value,
)
_Layer = tuple[str, ModuleInfo, tuple[str, str], tuple[str, str, str]]  # (name, info, grads key, machine key)


def classify_gradient(
    rms: float | None,
    ref_max: float,
    baseline: float | None,
    matrix: bool,
    depth: int,
    th: Thresholds,
    ahead: float | None = None,
    upstream: float | None = None,
) -> str:
    """rms: this module's gradient RMS (None: no gradient). ref_max: the largest over matrix layers of the same
    model; depth: how many of them have a gradient.
    ahead: the largest RMS of the same layer in the other blocks of a repeated stack (see ahead_rms).
    upstream: the largest RMS of the matrix layers that ran before it in the forward pass (see
    upstream_rms)."""
    if rms is None or rms == 0.0:
        return ABSENT
    if not math.isfinite(rms):
        return NON_FINITE
    if rms > th.explode_abs or (baseline and rms > th.explode_growth * baseline):
        return EXPLODING
    if matrix and (
        rms < th.vanish_abs
        or (
            depth >= th.vanish_min_layers
            and rms < th.vanish_ratio * ref_max
            and (ahead is None or rms < th.vanish_context_ratio * ahead)
            and (upstream is None or upstream * th.vanish_bypass_ratio <= rms)
        )
    ):
        return VANISHING
    return HEALTHY


@dataclass
class ModelFade:
    """A whole model's gradient norm over time, against its own early level.

    Why: the per-layer test compares a layer with the largest layer of the same model at the same step, so a
    model whose layers all shrink together (a GAN generator behind a discriminator that wins outright, a
    network whose weights collapse) never shows a vanishing layer. Its total gradient norm, compared with
    its own early level (the median of its first samples once it gets gradients: one odd batch does not set
    it), shows it. A learning model's gradient falls too as its loss falls (convergence): only a fall by a
    large factor while its own loss did not improve is a gradient that vanished."""

    early: list[float] = field(default_factory=list)
    high_step: int | None = None  # the last sample at or above the early level
    declining: bool = False  # the latest sample is clearly below the early level (fade_factor ** 0.25 times)
    held: int = 0  # the earliest step it told the monitor it might still date a fade at (see floor)

    def judge(self, step: int, norm: float, loss: tuple[float, float] | None, th: Thresholds) -> tuple[str, int]:
        """(state, onset) of one sample: vanishing, dated where the decline began (the sample after the last
        one at the early level, at most fade_lookback steps back), or healthy."""
        if len(self.early) < th.baseline_samples:
            self.early.append(norm)
            self.high_step = step
            return HEALTHY, step
        level = statistics.median(self.early)
        if norm >= level:
            self.high_step = step
        onset = max(self.onset(step, th), self.held)
        self.declining = norm * th.fade_factor**0.25 < level
        if loss is None or norm * th.fade_factor > level:
            return HEALTHY, step
        early, now = loss
        if early - now > th.fade_loss_gain * abs(early):
            return HEALTHY, step  # its loss improved: convergence, not a vanished gradient
        return VANISHING, onset

    def onset(self, now: int, th: Thresholds) -> int:
        """The step a fade seen at `now` is dated at: where the decline began, at most fade_lookback back."""
        start = self.high_step + 1 if self.high_step is not None else now
        return min(now, max(start, now - th.fade_lookback))

    def floor(self, now: int, th: Thresholds) -> int:
        """The earliest step a fade seen later could still be dated at: only a model clearly into a decline holds
        events back (a healthy gradient drifting down a little must not delay every event by fade_lookback);
        the others' fades are dated no earlier than now."""
        self.held = max(self.held, self.onset(now, th) if self.declining else now)
        return self.held


# ---------------------------------------------------------------- what a layer is compared with


def upstream_rms(model: ModelInfo, rms: dict[str, float | None]) -> dict[str, float]:
    """Per matrix layer, the largest gradient RMS among the matrix layers that ran before it in the forward
    pass (nearer the input). A gradient that vanishes toward the input leaves every earlier layer smaller
    still; an earlier layer that gets far more than a layer deeper in the net gets its gradient by another
    path (a U-Net's skip concatenations around its bottleneck), so that deep layer is a branch contributing
    little at the moment, not the input starved (see classify_gradient)."""
    out: dict[str, float] = {}
    top = 0.0
    modules = model.modules
    for n in model.order:
        info = modules.get(n)
        if info is None or not info.weight_ndim2:
            continue
        v = rms.get(n)
        if not _finite(v) or not v:
            continue
        if top > 0.0:
            out[n] = top
        top = max(top, v)
    return out


def ahead_rms(model: ModelInfo, rms: dict[str, float | None], roles: dict[str, str]) -> dict[str, float]:
    """Per matrix layer that repeats (the same name with other block numbers: `layer.0.attention.query`,
    `layer.5.attention.query`), the largest gradient RMS among its repeats. A gradient vanishing toward
    the input leaves a block's layer far below the same layer deeper in the stack; a layer that is small
    in every block is small by design (attention query/key at initialisation), not vanishing. `roles`: the
    observer's cache, module name -> its role (block numbers masked)."""
    groups: dict[str, list[str]] = {}
    for n, v in rms.items():
        if model.modules[n].weight_ndim2 and _finite(v):
            role = roles.get(n)
            if role is None:
                role = roles[n] = _DIGITS.sub("#", n)
            groups.setdefault(role, []).append(n)
    out: dict[str, float] = {}
    for names in groups.values():
        if len(names) >= 2:
            top = max(rms[n] for n in names)  # type: ignore[type-var]
            out.update((n, top) for n in names)  # type: ignore[misc]
    return out


class GradientObserver(Observer):
    """Per step, per model trained in it: each module's gradient RMS, classified and fed to its machine."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.grad_base: dict[tuple, list[float]] = {}
        self.baselines: dict[tuple, float] = {}  # key -> median of its full grad_base (it stops growing then)
        self.roles: dict[str, str] = {}  # module name -> its role (block numbers masked), see ahead_rms
        self.got_grad: set[tuple] = set()
        self.fades: dict[str, ModelFade] = {}  # root -> its whole gradient norm over time
        self.game = False  # several loss series reported in one step: models trained against each other
        self.layers: dict[str, tuple[ModelInfo, int, list[_Layer]]] = {}  # root -> its model, size, layers

    _upstream = staticmethod(upstream_rms)  # what a layer is compared with (tests read it here)

    def observe(self, rec: StepRecord) -> None:
        self.game = self.game or len(rec.losses) > 1
        for root, model in self.board.models.items():
            if rec.active is not None and root not in rec.active:
                continue  # a model not used this step (trained earlier, or not yet): its .grad is stale
            if rec.sampled:
                self._judge_fade(rec, root, model)
            self._judge_layers(rec, root, model)

    def _layers_of(self, root: str, model: ModelInfo) -> list[_Layer]:
        """The model's modules with the keys the per-step loop reads them by, made once (again for a new
        ModelInfo, or modules added to it; their sizes are read live: a rescan may add parameters)."""
        cached = self.layers.get(root)
        if cached is not None and cached[0] is model and cached[1] == len(model.modules):
            return cached[2]
        layers = [(name, info, (root, name), ("grad", root, name)) for name, info in model.modules.items()]
        self.layers[root] = (model, len(model.modules), layers)
        return layers

    def _judge_layers(self, rec: StepRecord, root: str, model: ModelInfo) -> None:
        """Each layer's gradient RMS, classified against the largest of its model's matrix layers (and the same
        layer in the other blocks, see ahead_rms) and fed to its machine when its state may change. Runs per layer
        per step: what only a change of state reads (the median layer, the evidence) is computed then."""
        th, grads, sampled = self.th, rec.grads, rec.sampled
        seen: list[tuple[_Layer, float | None]] = []  # (layer, its RMS: None where it has no gradient)
        matrix: list[float] = []  # finite positive RMS of the matrix layers
        for layer in self._layers_of(root, model):
            info = layer[1]
            if info.params == 0:
                continue
            gs = grads.get(layer[2])
            norm = None if gs is None else gs.norm
            if norm is None:
                if sampled:
                    seen.append((layer, None))
                continue
            if -INF < norm < INF:  # math.isfinite, without a call (this loop runs per layer per step)
                value = norm / math.sqrt(info.params)
                if info.weight_ndim2 and value > 0:
                    matrix.append(value)
            else:
                value = norm
            seen.append((layer, value))
        ref_max = max(matrix, default=0.0)
        ref_median: float | None = None  # statistics.median(matrix), when first needed
        depth = len(matrix)
        ahead: dict[str, float] = {}
        upstream: dict[str, float] = {}
        if matrix and depth >= th.vanish_min_layers and min(matrix) < th.vanish_ratio * ref_max:
            # the same layer in other blocks matters only to a matrix layer far below the largest
            by_name = {layer[0]: rms for layer, rms in seen}
            ahead = ahead_rms(model, by_name, self.roles)
            upstream = upstream_rms(model, by_name)
        machines, since, got_grad = self.board.machines, self.board.grad_since, self.got_grad
        n_base = th.baseline_samples
        for (name, info, gkey, key), rms in seen:
            if rms is not None and 0.0 < rms < INF:
                if gkey not in got_grad:
                    got_grad.update((gkey, (root, None)))  # (root, None): some part of this model trains
                if rms > since.get(gkey, 0.0):  # the largest since the last sample
                    since[gkey] = rms
            elif rms is None and not (info.in_optimizer or (root, None) in got_grad):
                continue  # not meant to train: no optimizer holds it and no part of its model gets gradients (an
                # EMA copy or a teacher called with gradients on)
            baseline = self.baselines.get(key)
            if baseline is None:  # a full grad_base no longer grows: its median is the baseline
                base = self.grad_base.setdefault(key, [])
                if len(base) >= n_base:
                    baseline = self.baselines[key] = statistics.median(base)
            state = classify_gradient(
                rms,
                ref_max,
                baseline,
                info.weight_ndim2,
                depth,
                th,
                ahead.get(name) if ahead else None,
                upstream.get(name) if upstream else None,
            )
            # the baseline that growth is measured against: the layer's own early scale, once it is on the scale
            # of its model's layers. A factor that starts at exactly 0 or ~1e-6 by construction (LoRA's A while B
            # is 0, a zero-initialised branch or gate) grows by orders of magnitude to a normal size: not an
            # explosion
            if baseline is None and state == HEALTHY and rms and len(base) < n_base:
                if ref_median is None:
                    ref_median = statistics.median(matrix) if matrix else 0.0
                if rms >= ref_median * th.baseline_peer_ratio:
                    base.append(rms)
            if settled(machines, key, state):
                continue  # nothing changes (most layer-steps): no evidence to build
            if ref_median is None:
                ref_median = statistics.median(matrix) if matrix else 0.0
            metrics = {
                "rms": rms,
                "ratio_to_max": (rms / ref_max) if _finite(rms) and ref_max else None,
                "ratio_to_median": (rms / ref_median) if _finite(rms) and ref_median else None,
                "baseline_rms": baseline,
            }
            self.board.feed(key, HEALTHY, state, rec.step, metrics, ETYPE, "gradient", root, name)

    def _judge_fade(self, rec: StepRecord, root: str, model: ModelInfo) -> None:
        """The model's whole gradient norm on a sampled step, against its own early level (see ModelFade)."""
        norms = [rec.grads.get((root, n)) for n, info in model.modules.items() if info.params]
        values = [g.norm for g in norms if g is not None and g.norm is not None]
        if not values or not all(map(math.isfinite, values)) or len(values) < len(norms):
            return  # no gradient yet (a GAN's G read at D's step), part of it missing, or not finite (judged per layer)
        norm = math.sqrt(sum([v * v for v in values]))
        if norm <= 0:
            return
        tracks = self.board.losses.series
        series = self.board.losses.own(root)
        track = tracks.get(series) if series is not None else None
        loss = track.levels() if track is not None else None
        fade = self.fades.setdefault(root, ModelFade())
        state, onset = fade.judge(rec.step, norm, loss, self.th)
        key = ("grad", root, None)
        if settled(self.board.machines, key, state):
            return
        level = statistics.median(fade.early)
        metrics: dict[str, float | None] = {
            "grad_norm": norm,
            "early_norm": level,
            "fade": level / norm,
            "loss_early": loss[0] if loss else None,
            "loss_now": loss[1] if loss else None,
            "game": 1.0 if self.game else 0.0,
        }
        rivals = [t.levels() for n, t in tracks.items() if n != series]
        drops = [now / early for early, now in filter(None, rivals) if early > 0 and now >= 0]
        if self.game and drops:
            metrics["rival_loss_ratio"] = min(drops)  # the opponent whose loss fell most (-> 0: it wins)
        first = next((n for n in model.order if n in model.modules and model.modules[n].weight_ndim2), None)
        self.board.feed(
            key,
            HEALTHY,
            state,
            onset,
            metrics,
            ETYPE,
            FADE_SITE,
            root,
            first,
        )

    def floor(self, now: int) -> int:
        """A fade is dated back to where the decline began (at most fade_lookback steps)."""
        return min([now, *(f.floor(now, self.th) for f in self.fades.values())])

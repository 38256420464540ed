"""Pure health state machines: StepRecords in, SemanticEvents out (no torch here).

Each site (a module's gradient, a module's output, the model input, the loss, a module's weights) has
one small classifier, a pure function from statistics to a state, and one debounced state machine that
emits an event when a new state has held for `debounce` observations. The event carries the step where
the state *began*, so the reasoner sees onsets, not confirmations. Non-finite values skip the debounce."""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import (RUN_STATES, ActState, ActStats, DataState, EventType, GradState, LossState,
                                  ModelInfo, SemanticEvent, StepRecord, UpdateState)

HEALTHY = {GradState.healthy.value, ActState.normal.value, LossState.normal.value, DataState.normal.value,
           UpdateState.updating.value}
NON_FINITE = "non_finite"


def _finite(v: Optional[float]) -> bool:
    return v is not None and math.isfinite(v)


# ---------------------------------------------------------------- classifiers (pure functions)

def classify_gradient(rms: Optional[float], ref_max: float, ref_median: float, baseline: Optional[float],
                      matrix: bool, depth: int, th: Thresholds) -> str:
    """rms: this module's gradient RMS (None: no gradient). ref_*: over matrix layers of the same model."""
    if rms is None or rms == 0.0:
        return GradState.absent.value
    if not math.isfinite(rms):
        return GradState.non_finite.value
    if rms > th.explode_abs or (baseline and rms > th.explode_growth * baseline):
        return GradState.exploding.value
    if matrix and (rms < th.vanish_abs or (depth >= 3 and rms < th.vanish_ratio * ref_max)):
        return GradState.vanishing.value
    return GradState.healthy.value


def classify_activation(s: ActStats, baseline_std: Optional[float], th: Thresholds, output_layer: bool = False) -> str:
    """output_layer: the model's last layer, whose units are its outputs (logits): a dead one can never fire."""
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return ActState.non_finite.value
    relu_like = s.min >= 0 and s.zero_frac >= 0.05  # exact zeros: a ReLU's output, not a sigmoid's
    if relu_like and s.dead_frac >= (th.dead_output_frac if output_layer else th.dead_frac):
        return ActState.dead.value
    sat = 0.0 if relu_like else s.sat01 if (s.min >= 0 and s.max <= 1) else s.sat11 if (s.min >= -1 and s.max <= 1) else 0.0
    if sat >= th.saturated_frac:
        return ActState.saturated.value
    if baseline_std and s.std > th.anomalous_growth * baseline_std:
        return ActState.anomalous.value
    return ActState.normal.value


def classify_data(s: ActStats, baseline: Optional[tuple[float, float]], scale_limit: float,
                  th: Thresholds) -> str:
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return DataState.non_finite.value
    if max(abs(s.mean), s.std) > scale_limit:
        return DataState.extreme_scale.value
    if baseline is not None:
        b_mean, b_std = baseline
        ref = max(b_std, 1e-6)
        if abs(s.mean - b_mean) > th.data_shift * ref or s.std > th.data_shift * ref or s.std * th.data_shift < b_std:
            return DataState.shifted.value
    return DataState.normal.value


def classify_loss(first: list[float], recent: list[float], best: float, th: Thresholds) -> str:
    """first/recent: the first and the latest 2 windows of finite losses; best: lowest window median."""
    w = th.loss_window
    # the loss at initialisation, unless the first window is lower (a blow-up right away must not
    # make everything after it look like progress)
    start, now = min(first[0], statistics.median(first)), statistics.median(recent[-w:])
    scale = max(abs(start), 1e-12)
    diffs = [b - a for a, b in zip(recent, recent[1:])]
    if len(diffs) >= w:
        level = statistics.median(abs(v) for v in recent) or scale
        rel = statistics.fmean(abs(d) for d in diffs) / level
        flips = sum(1 for a, b in zip(diffs, diffs[1:]) if a * b < 0) / max(1, len(diffs) - 1)
        if rel > th.oscillation and flips >= 0.4 and now > 0.5 * start:
            return LossState.oscillating.value
        # it learned, yet keeps jumping back above where it started: a healthy run rarely does that
        above = sum(1 for v in recent if v > start)
        if start > 0 and above >= 2 and best < 0.5 * start and flips >= 0.3 and rel > th.oscillation:
            return LossState.oscillating.value
    if start > 0 and now > th.diverge_factor * start and now > th.diverge_factor * max(best, 1e-12):
        return LossState.diverging.value
    if (start - best) / scale < th.plateau_improvement:
        return LossState.plateau.value
    return LossState.normal.value


# ---------------------------------------------------------------- debounced state machine

@dataclass
class Machine:
    """State of one site. `observe` returns an event payload when a new state is confirmed."""

    state: str
    need: int
    cand: Optional[str] = None
    cand_step: int = 0
    cand_metrics: dict[str, Any] = field(default_factory=dict)
    count: int = 0

    def observe(self, state: str, step: int, metrics: dict[str, Any]) -> list[tuple[str, str, int, dict]]:
        if state == self.state:
            self.cand, self.count = None, 0
            return []
        if state == NON_FINITE and self.cand not in (None, NON_FINITE):
            # what was building up (e.g. exploding) is the story of this NaN: confirm it first
            early = (self.state, self.cand, self.cand_step, self.cand_metrics)
            self.state, self.cand = self.cand, None
            return [early, *self.observe(state, step, metrics)]
        if state != self.cand:
            if self.cand is not None and self.count >= min(2, self.need) and state not in HEALTHY:
                # held twice, then something worse took over (exploding -> dead): it happened, say so
                early = (self.state, self.cand, self.cand_step, self.cand_metrics)
                self.state, self.cand, self.count = self.cand, None, 0
                return [early, *self.observe(state, step, metrics)]
            self.cand, self.cand_step, self.cand_metrics, self.count = state, step, metrics, 0
        self.count += 1
        if self.count >= (1 if state == NON_FINITE else self.need):
            old, self.state, self.cand, self.count = self.state, state, None, 0
            return [(old, state, self.cand_step, self.cand_metrics)]
        return []

    def pending(self) -> Optional[tuple[str, str, int, dict]]:
        """A candidate seen at least twice but cut short by the end of the run."""
        if self.cand is not None and self.count >= min(2, self.need):
            return self.state, self.cand, self.cand_step, self.cand_metrics
        return None


def _rounded(d: dict[str, Any]) -> dict[str, Optional[float]]:
    out: dict[str, Optional[float]] = {}
    for k, v in d.items():
        if v is None:
            out[k] = None
        elif isinstance(v, float) and math.isfinite(v):
            out[k] = float(f"{v:.6g}")
        elif isinstance(v, float):
            out[k] = None if math.isnan(v) else (1e308 if v > 0 else -1e308)
        else:
            out[k] = float(v)
    return out


# ---------------------------------------------------------------- the monitor

class Monitor:
    """Feeds each site's classifier and machine; `emit` receives every SemanticEvent as it happens."""

    def __init__(self, thresholds: Thresholds, emit: Callable[[SemanticEvent], None]) -> None:
        self.th, self.emit = thresholds, emit
        self.models: dict[str, ModelInfo] = {}
        self.machines: dict[tuple, Machine] = {}
        self.grad_base: dict[tuple, list[float]] = {}
        self.act_base: dict[tuple, list[float]] = {}
        self.data_base: dict[tuple, list[tuple[float, float]]] = {}
        self.last_weights: dict[tuple, tuple] = {}  # checksums at the last sample
        self.got_grad: set[tuple] = set()
        self.grad_since: dict[tuple, float] = {}  # largest gradient RMS since the last sample
        self.first_losses: list[float] = []
        self.recent_losses: deque[float] = deque(maxlen=2 * thresholds.loss_window)
        self.best_loss = math.inf
        self.best_step = 0
        self.prev_active: set[str] = set()
        self.losses_seen = 0
        self.last_loss: Optional[float] = None
        self.steps_seen = 0
        self.last_step = -1

    def set_models(self, models: list[ModelInfo]) -> None:
        self.models = {m.name: m for m in models}

    # -- plumbing

    def _machine(self, key: tuple, initial: str) -> Machine:
        m = self.machines.get(key)
        if m is None:
            m = self.machines[key] = Machine(initial, self.th.debounce)
        return m

    def _feed(self, key: tuple, initial: str, state: str, step: int, metrics: dict, etype: str,
              site: str, root: Optional[str], module: Optional[str]) -> None:
        for hit in self._machine(key, initial).observe(state, step, metrics):
            self._emit(etype, site, root, module, *hit)

    def _emit(self, etype: str, site: str, root: Optional[str], module: Optional[str], old: str, new: str,
              step: int, metrics: dict) -> None:
        if new == NON_FINITE and etype != EventType.data_anomaly.value:
            etype = EventType.non_finite.value
        self.emit(SemanticEvent(type=etype, step=step, module=module or None, root=root or None,
                                **{"from": old}, to=new, metrics=_rounded(metrics), site=site))

    # -- per step

    def observe(self, rec: StepRecord) -> None:
        self.steps_seen += 1
        self.last_step = rec.step
        if rec.active:
            if self.prev_active and rec.active.isdisjoint(self.prev_active):
                self._reset_loss()  # another model took over: its loss curve starts afresh
            self.prev_active = set(rec.active)
        self._observe_data(rec)
        self._observe_acts(rec)
        self._observe_grads(rec)
        if rec.sampled:
            self._observe_weights(rec)
        if rec.loss is not None:
            self._observe_loss(rec.step, rec.loss)

    def _observe_data(self, rec: StepRecord) -> None:
        for (root, module, site), s in rec.acts.items():
            if site not in ("input", "target"):
                continue
            key = ("data", root, site)
            etype = EventType.data_anomaly.value
            if not isinstance(s, ActStats):
                if not math.isfinite(s):
                    self._feed(key, DataState.normal.value, NON_FINITE, rec.step, {"sum": s}, etype, site, root, None)
                continue
            base = self.data_base.setdefault(key, [])
            baseline = _median_pair(base) if len(base) >= 3 else None
            limit = self.th.data_scale if site == "input" else self.th.target_scale
            state = classify_data(s, baseline, limit, self.th)
            if state == DataState.normal.value and len(base) < 3:
                base.append((s.mean, s.std))
            metrics = {"mean": s.mean, "std": s.std, "min": s.min, "max": s.max, "nonfinite": s.nonfinite}
            if baseline:
                metrics.update(baseline_mean=baseline[0], baseline_std=baseline[1])
            self._feed(key, DataState.normal.value, state, rec.step, metrics, etype, site, root, None)

    def _observe_acts(self, rec: StepRecord) -> None:
        for (root, module, site), s in rec.acts.items():
            if site in ("input", "target", "loss"):
                continue
            key = ("act", root, module, site)
            etype = EventType.activation_regime_shift.value
            if not isinstance(s, ActStats):
                if not math.isfinite(s):
                    self._feed(key, ActState.normal.value, NON_FINITE, rec.step, {"sum": s}, etype, site, root, module)
                continue
            base = self.act_base.setdefault(key, [])
            baseline = statistics.median(base) if len(base) >= 3 else None
            state = classify_activation(s, baseline, self.th, output_layer=module == self._output_layer(root))
            if state == ActState.normal.value and len(base) < 3 and s.std > 0:
                base.append(s.std)
            metrics = {"mean": s.mean, "std": s.std, "min": s.min, "max": s.max, "zero_frac": s.zero_frac,
                       "dead_frac": s.dead_frac, "sat_frac": max(s.sat01, s.sat11) if s.max <= 1 else 0.0,
                       "nonfinite": s.nonfinite}
            self._feed(key, ActState.normal.value, state, rec.step, metrics, etype, site, root, module)

    def _output_layer(self, root: str) -> Optional[str]:
        model = self.models.get(root)
        if model is None:
            return None
        layers = [n for n in model.order if n in model.modules and model.modules[n].params]
        return layers[-1] if layers else None

    def _observe_grads(self, rec: StepRecord) -> None:
        for root, model in self.models.items():
            if rec.active is not None and root not in rec.active:
                continue  # a model not used this step (trained earlier, or not yet): its .grad is stale
            rms: dict[str, Optional[float]] = {}
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
            for name, value in rms.items():
                self._judge_gradient(rec, model, root, name, value, ref_max, ref_median, len(matrix))

    def _judge_gradient(self, rec: StepRecord, model: ModelInfo, root: str, name: str, value: Optional[float],
                        ref_max: float, ref_median: float, depth: int) -> None:
        info = model.modules[name]
        key = ("grad", root, name)
        if _finite(value) and value > 0:
            self.got_grad.add((root, name))
            self.grad_since[(root, name)] = max(value, self.grad_since.get((root, name), 0.0))
        if value is None and not (info.in_optimizer or self.got_grad):
            return  # not meant to train: no optimizer holds it and nothing else gets gradients either
        base = self.grad_base.setdefault(key, [])
        baseline = statistics.median(base) if len(base) >= 3 else None
        state = classify_gradient(value, ref_max, ref_median, baseline, info.weight_ndim2, depth, self.th)
        if state == GradState.healthy.value and len(base) < 3 and value:
            base.append(value)
        machine = self.machines.get(key)
        if machine is not None and machine.state == state and machine.cand is None:
            return  # nothing changes (most module-steps): skip building the evidence
        metrics = {"rms": value, "ratio_to_max": (value / ref_max) if _finite(value) and ref_max else None,
                   "ratio_to_median": (value / ref_median) if _finite(value) and ref_median else None,
                   "baseline_rms": baseline}
        self._feed(key, GradState.healthy.value, state, rec.step, metrics,
                   EventType.gradient_health_transition.value, "gradient", root, name)

    def _observe_weights(self, rec: StepRecord) -> None:
        """Unchanged = a module that had a gradient at some step since the last sample, yet whose weights
        are bit-identical to that sample's (the same checksum of every parameter). Comparing samples, not one
        optimizer step, also catches weights that something puts back after each step. Layers whose
        gradient vanished are left to the gradient classifier."""
        for (root, name), gs in rec.grads.items():
            if gs.weight_norm is None or (rec.active is not None and root not in rec.active):
                continue
            key = ("weights", root, name)
            prev = self.last_weights.get(key)
            now = self.last_weights[key] = gs.checksum
            grad = self.grad_since.pop((root, name), None)
            if prev is None or now is None or grad is None:
                continue  # nothing to compare, or nothing pushed it since
            machine = self.machines.get(("grad", root, name))
            if machine is not None and (machine.state != GradState.healthy.value or machine.cand is not None):
                continue  # a vanishing/absent gradient explains still weights better
            info = self.models[root].modules.get(name) if root in self.models else None
            state = UpdateState.unchanged.value if now == prev else UpdateState.updating.value
            metrics = {"weight_norm": gs.weight_norm, "grad_rms": grad,
                       "in_optimizer": float(bool(info and info.in_optimizer))}
            self._feed(key, UpdateState.updating.value, state, rec.step, metrics,
                       EventType.parameter_update.value, "weights", root, name)

    def _reset_loss(self) -> None:
        self.first_losses, self.best_loss, self.best_step, self.losses_seen = [], math.inf, 0, 0
        self.recent_losses.clear()
        machine = self.machines.get(("loss",))
        if machine is not None:
            machine.state, machine.cand, machine.count = LossState.normal.value, None, 0

    def _observe_loss(self, step: int, loss: float) -> None:
        key = ("loss",)
        etype = EventType.optimizer_instability.value
        self.last_loss = loss
        if not math.isfinite(loss):
            self._feed(key, LossState.normal.value, NON_FINITE, step, {"loss": loss}, etype, "loss", None, None)
            return
        self.losses_seen += 1
        w = self.th.loss_window
        if len(self.first_losses) < w:
            self.first_losses.append(loss)
        self.recent_losses.append(loss)
        if len(self.recent_losses) >= w:
            window = statistics.median(list(self.recent_losses)[-w:])
            if window < self.best_loss:
                self.best_loss, self.best_step = window, step - w // 2
        if self.losses_seen < 3 * w:
            return
        state = classify_loss(self.first_losses, list(self.recent_losses), self.best_loss, self.th)
        metrics = {"loss": loss, "start": min(self.first_losses[0], statistics.median(self.first_losses)),
                   "best": self.best_loss,
                   "recent": statistics.median(list(self.recent_losses)[-w:]),
                   "low": min(self.recent_losses), "high": max(self.recent_losses)}
        # judged over a window: the state began before it was recognised
        onset = {LossState.diverging.value: self.best_step,
                 LossState.oscillating.value: step - len(self.recent_losses) + 1}.get(state, step)
        self._feed(key, LossState.normal.value, state, max(0, onset), metrics, etype, "loss", None, None)

    def finish(self) -> None:
        """End of run: confirm states cut short by the end, then one summary event."""
        for key, machine in self.machines.items():
            hit = machine.pending()
            if hit is None:
                continue
            etype, site, root, module = _describe(key)
            self._emit(etype, site, root, module, *hit)
        metrics = {"steps": float(self.steps_seen), "losses": float(self.losses_seen),
                   "first_loss": statistics.median(self.first_losses) if self.first_losses else None,
                   "best_loss": self.best_loss if math.isfinite(self.best_loss) else None,
                   "last_loss": self.last_loss}
        self.emit(SemanticEvent(type=EventType.run_summary.value, step=max(self.last_step, 0), module=None,
                                **{"from": RUN_STATES[0]}, to=RUN_STATES[1], metrics=_rounded(metrics), site="run"))


def _describe(key: tuple) -> tuple[str, str, Optional[str], Optional[str]]:
    kind = key[0]
    if kind == "grad":
        return EventType.gradient_health_transition.value, "gradient", key[1], key[2]
    if kind == "act":
        return EventType.activation_regime_shift.value, key[3], key[1], key[2]
    if kind == "data":
        return EventType.data_anomaly.value, key[2], key[1], None
    if kind == "weights":
        return EventType.parameter_update.value, "weights", key[1], key[2]
    return EventType.optimizer_instability.value, "loss", None, None


def _median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)

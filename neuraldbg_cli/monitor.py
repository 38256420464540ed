"""Pure health state machines: StepRecords in, SemanticEvents out (no torch here).

Each site (a module's gradient, a module's output, the model input, the loss, a module's weights) has
one small classifier, a pure function from statistics to a state, and one debounced state machine that
emits an event when a new state has held for `debounce` observations. The event carries the step where
the state *began*, so the reasoner sees onsets, not confirmations. Non-finite values skip the debounce."""

from __future__ import annotations

import math
import re
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.events import (
    RUN_STATES,
    ActState,
    ActStats,
    DataState,
    EventType,
    GradState,
    LossState,
    ModelInfo,
    SemanticEvent,
    StepRecord,
    UpdateState,
)

HEALTHY = {
    GradState.healthy.value,
    ActState.normal.value,
    LossState.normal.value,
    DataState.normal.value,
    UpdateState.updating.value,
}
NON_FINITE = "non_finite"
_DIGITS = re.compile(r"\d+")  # block numbers in module names


def _finite(v: float | None) -> TypeGuard[float]:
    return v is not None and math.isfinite(v)


# ---------------------------------------------------------------- classifiers (pure functions)


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
    ahead: the largest RMS of the same layer in the other blocks of a repeated stack (see Monitor._ahead)."""
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


def classify_activation(s: ActStats, baseline_std: float | None, th: Thresholds, output_layer: bool = False) -> str:
    """output_layer: the model's last layer, whose units are its outputs (logits): a dead one can never fire,
    and their scale grows by orders of magnitude as a classifier grows confident (from a near-0 init)."""
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return ActState.non_finite.value
    relu_like = s.min >= 0 and s.zero_frac >= th.relu_zero_frac  # exact zeros: a ReLU's output, not a sigmoid's
    if relu_like and s.dead_frac >= (th.dead_output_frac if output_layer else th.dead_frac):
        return ActState.dead.value
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
        return ActState.saturated.value
    growth = th.anomalous_output_growth if output_layer else th.anomalous_growth
    if baseline_std and s.std > growth * baseline_std:
        return ActState.anomalous.value
    return ActState.normal.value


def classify_data(s: ActStats, baseline: tuple[float, float] | None, scale_limit: float, th: Thresholds) -> str:
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return DataState.non_finite.value
    if max(abs(s.mean), s.std) > scale_limit:
        return DataState.extreme_scale.value
    if baseline is not None:
        b_mean, b_std = baseline
        ref = max(b_std, th.data_std_floor)
        if abs(s.mean - b_mean) > th.data_shift * ref or s.std > th.data_shift * ref or s.std * th.data_shift < b_std:
            return DataState.shifted.value
    return DataState.normal.value


# ---------------------------------------------------------------- debounced state machine


@dataclass
class Machine:
    """State of one site. `observe` returns an event payload when a new state is confirmed: held for `need`
    observations, or for `early` when something worse takes over or the run ends."""

    state: str
    need: int
    early: int
    cand: str | None = None
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
            if self.cand is not None and self.count >= min(self.early, self.need) and state not in HEALTHY:
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

    def pending(self) -> tuple[str, str, int, dict] | None:
        """A candidate seen at least twice but cut short by the end of the run."""
        if self.cand is not None and self.count >= min(self.early, self.need):
            return self.state, self.cand, self.cand_step, self.cand_metrics
        return None


def _rounded(d: dict[str, Any]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
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


# ---------------------------------------------------------------- the loss model


class LossSeries:
    """One loss series judged as a noisy process (statistical process control, not step counts).

    Positive losses are judged on log(loss), where a factor is a distance and the noise is relative; a
    series that ever goes <= 0 is judged on raw values (factors then measured against the loss's scale).
    The level is a short rolling median (one batch's spike does not move it); the noise is the robust spread
    (MAD) of the step-to-step differences, so a steady trend does not count as noise; the reference is the
    best level so far with the noise measured when it was reached (the in-control phase). An upward CUSUM
    against best + k noise widths dates a rise where it began, not where it was confirmed."""

    # set by _restart: None until known
    best_noise: float | None
    rise_from: int | None
    _noise: float | None
    prev_y: float | None
    learned: int | None

    def __init__(self, th: Thresholds) -> None:
        self.th = th
        self.raw = False  # judged on raw values (a loss <= 0 was seen)
        self.hist: deque[tuple[int, float]] = deque(maxlen=2 * th.loss_window)  # (step, raw loss)
        self.first: list[float] = []  # the first loss_level_window losses, raw
        self.first_step = 0
        self.n = 0
        self.last: float | None = None
        self.alone = True  # never reported in the same step as another series (a GAN's G and D: a game)
        self._restart()

    def _restart(self) -> None:
        """(Re)build the judged statistics from the raw history (after switching to raw values)."""
        past, self.best, self.best_noise = list(self.hist), math.inf, None
        self.cusum, self.rise_from, self._noise, self.prev_y, self.learned = 0.0, None, None, None, None
        self.late: deque[float] = deque(maxlen=self.th.plateau_min_losses)  # the latest judged values
        self._improved = False
        self.diffs: deque[float] = deque(maxlen=self.th.loss_noise_window)  # judged step-to-step differences
        self.levels: deque[float] = deque(maxlen=self.th.loss_level_window)
        self.hist.clear()
        for step, loss in past:
            self._update(step, loss)

    def _y(self, loss: float) -> float:
        return loss if self.raw else math.log(loss)

    def _x(self, y: float) -> float | None:
        return None if not math.isfinite(y) else y if self.raw else math.exp(y)

    def _unit(self) -> float:
        """What a relative change is measured against: 1 on log values, the loss's size on raw values."""
        if not self.raw:
            return 1.0
        return max(abs(statistics.median(self.first)) if self.first else 0.0, abs(self.best), 1e-12)

    def _factor(self, f: float) -> float:
        """The distance of a rise by the factor f."""
        return math.log(f) if not self.raw else (f - 1) * self._unit()

    def noise(self) -> float | None:
        """Per-step noise: 1.4826 * MAD of the step-to-step differences / sqrt(2); None while too few."""
        diffs = self.diffs
        if len(diffs) < self.th.loss_noise_min:
            return None
        mid = statistics.median(diffs)
        return 1.4826 * statistics.median([abs(d - mid) for d in diffs]) / math.sqrt(2)

    def _update(self, step: int, loss: float) -> None:
        self.hist.append((step, loss))
        y = self._y(loss)
        if self.prev_y is not None:
            self.diffs.append(y - self.prev_y)
        self.prev_y = y
        self.late.append(y)
        self.levels.append(y)
        level = self.level = statistics.median(self.levels)
        noise = self._noise = self.noise()
        if level < self.best:
            self.best, self.best_noise = level, noise
            factor = self.th.learned_factor
            fell = level < self.start() - math.log(factor) if not self.raw else factor * level < self._start
            if self.learned is None and self.first and fell:
                self.learned = step  # it learned (an oscillation's jumps back count after)
        # upward CUSUM against the best level plus an allowance of k noise widths: it stays at 0 while the
        # loss hovers at (or falls below) its best; the last step it was 0 is where a rise began
        allow = self.th.loss_cusum_k * max(noise or 0.0, self.best_noise or 0.0)
        self.cusum = max(0.0, self.cusum + y - self.best - allow)
        if self.cusum == 0.0:
            self.rise_from = None
        elif self.rise_from is None:
            self.rise_from = step

    def add(self, step: int, loss: float) -> tuple[str, int, dict[str, Any]]:
        """A finite loss: returns (state, onset step, metrics)."""
        if self.n == 0:
            self.first_step = step
        self.n += 1
        self.last = loss
        if len(self.first) < self.th.loss_level_window:
            self.first.append(loss)
            self._start = min(self.first[0], statistics.median(self.first))
        if loss <= 0 and not self.raw:
            self.raw = True
            self._restart()
        self._update(step, loss)
        return self._judge(step)

    def start(self) -> float:
        """The loss at initialisation, unless the first few are lower (a blow-up right away must not make
        everything after it look like progress)."""
        return self._y(self._start)

    def improved(self, noise: float | None) -> bool:
        """The loss learned since the start, meaningfully and significantly: the median of its latest k values
        is plateau_improvement below the start level, by more than plateau_sigma standard errors (medians of
        m1 and m2 values of noise s differ by s*sqrt(pi/2*(1/m1+1/m2)) by chance). Once true it stays true: a
        loss that learned and rose again is judged by the divergence test, not as a plateau."""
        if self._improved or self.n < 2:
            return self._improved
        k = max(1, min(self.th.plateau_min_losses, self.n // 2))
        gain = self.start() - statistics.median(list(self.late)[-k:])
        se = (noise or 0.0) * math.sqrt(math.pi / 2 * (1 / len(self.first) + 1 / k))
        self._improved = gain > max(-self._factor(1 - self.th.plateau_improvement), self.th.plateau_sigma * se)
        return self._improved

    def _judge(self, step: int) -> tuple[str, int, dict[str, Any]]:
        th = self.th
        start, level, noise = self.start(), self.level, self._noise
        ref_noise = max(noise or 0.0, self.best_noise or 0.0)
        metrics: dict[str, Any] = {
            "loss": self.last,
            "start": self._x(start),
            "best": self._x(self.best),
            "recent": self._x(level),
            "noise": ref_noise if noise is not None else None,
        }
        # diverging: the level rose a factor above its best, beyond what the series' own noise explains;
        # before the noise is known, only a rise by the early factor (10x) counts
        rise = level - self.best
        # a game's payoff (GAN, actor-critic: models trained against each other in the same steps) rises
        # as the other side improves: only a rise by the early factor is divergence there
        if noise is None or not self.alone:
            need = max(self._factor(th.diverge_early_factor), th.loss_diverge_sigma * ref_noise)
        else:
            need = max(self._factor(th.diverge_factor), th.loss_diverge_sigma * ref_noise)
        if rise > need:
            metrics["rise_factor"] = math.exp(rise) if not self.raw else None
            return LossState.diverging.value, self.rise_from if self.rise_from is not None else step, metrics
        osc = self._oscillating(start)
        if osc is not None:
            metrics.update(osc[1])
            return LossState.oscillating.value, osc[0], metrics
        if self.plateau(noise):
            metrics["improvement"] = 1 - math.exp(statistics.median(self.late) - self.start())
            return LossState.plateau.value, max(self.first_step, step - th.plateau_min_losses + 1), metrics
        return LossState.normal.value, step, metrics

    def plateau(self, noise: float | None) -> bool:
        """Long enough, never improved beyond its noise since the start, not falling now, and far above its noise (a
        loss at its noise floor from the start is a converged model being fine-tuned, not a stuck one).
        Only for a positive series trained alone: the losses of models trained against each other (GAN,
        actor-critic) are a game's payoffs, not expected to fall, and a loss that can be negative has no floor
        to be judged against."""
        if self.raw or not self.alone or self.n < self.th.plateau_min_losses or noise is None:
            return False
        if self.improved(noise) or noise / self._unit() >= self.th.plateau_max_noise:
            return False
        # still falling: the latest half of the window significantly below its earlier half (slow learning)
        late, h = list(self.late), len(self.late) // 2
        se = noise * math.sqrt(math.pi / 2 * 2 / max(1, h))
        return statistics.median(late[:h]) - statistics.median(late[h:]) <= self.th.plateau_sigma * se

    def _oscillating(self, start_y: float) -> tuple[int, dict[str, Any]] | None:
        """Large swings relative to the loss level over the latest 2 windows, with frequent sign changes,
        while the loss has not learned, or keeps jumping back above where it started. Judged over a rolling
        window, so an oscillation that settled goes back to normal."""
        w = self.th.loss_window
        if len(self.hist) < 2 * w:
            return None
        recent = [v for _, v in self.hist]
        diffs = [b - a for a, b in zip(recent, recent[1:])]
        swing = sum(map(abs, diffs)) / len(diffs)
        if swing <= self.th.oscillation * min(map(abs, recent)):
            return None  # cheap exit (most steps): below the threshold even against the smallest loss
        start = self._x(start_y) or 0.0
        level = statistics.median(abs(v) for v in recent) or max(abs(start), 1e-12)
        rel = swing / level
        if rel <= self.th.oscillation:
            return None
        flips = sum(1 for a, b in zip(diffs, diffs[1:]) if a * b < 0) / max(1, len(diffs) - 1)
        now = statistics.median(recent[-w:])
        best = self._x(self.best)
        above = sum(1 for s, v in self.hist if v > start and self.learned is not None and s > self.learned)
        # not learning: swinging up well beyond where it started (a loss at its noise floor from the start,
        # e.g. a converged model fine-tuned, swings ~1.5x around its start level, never 3x)
        th, learned_level = self.th, start / self.th.learned_factor
        if not (
            (flips >= th.oscillation_flips and now > learned_level and max(recent) > th.oscillation_high * start)
            or (
                start > 0
                and above >= th.oscillation_jumps
                and best is not None
                and best < learned_level
                and flips >= th.oscillation_flips_learned
            )
        ):
            return None
        return self.hist[0][0], {"low": min(recent), "high": max(recent), "swing": rel}

    def earliest_onset(self, step: int, diverged: bool) -> int:
        """The earliest step a later state of this series could be dated at (diverged: already confirmed,
        so a rise under way can date nothing new)."""
        onset = step - 2 * self.th.loss_window  # an oscillation is dated at its window's start
        if self.alone and not self.raw and not self.improved(self._noise):
            onset = min(onset, step - self.th.plateau_min_losses + 1)  # a plateau may still be recognised
        if self.rise_from is not None and not diverged:
            onset = min(onset, self.rise_from)
        return onset


# ---------------------------------------------------------------- the monitor


class Monitor:
    """Feeds each site's classifier and machine; `emit` receives every SemanticEvent in step order.

    Events are dated at the onset of their state, which can be earlier than events already confirmed
    elsewhere; a small reorder buffer holds them until no earlier-dated event can still come (the oldest
    pending candidate of any machine, each loss series' change-point lookback), and a non-finite event
    flushes it at the end of its step (a run about to crash must still leave its trace)."""

    def __init__(self, thresholds: Thresholds, emit: Callable[[SemanticEvent], None]) -> None:
        self.th, self.emit = thresholds, emit
        self.models: dict[str, ModelInfo] = {}
        self.machines: dict[tuple, Machine] = {}
        self.grad_base: dict[tuple, list[float]] = {}
        self.act_base: dict[tuple, list[float]] = {}
        self.data_base: dict[tuple, list[tuple[float, float]]] = {}
        self.last_weights: dict[tuple, tuple] = {}  # checksums at the last sample
        self.weight_hist: dict[tuple, tuple[float, float]] = {}  # (root, module) -> (first, last) weight norm
        self.got_grad: set[tuple] = set()
        self.grad_since: dict[tuple, float] = {}  # largest gradient RMS since the last sample
        self.series: dict[str, LossSeries] = {}
        self.main_series: LossSeries | None = None  # the first series seen: the run summary's losses
        self.held: list[tuple[int, int, SemanticEvent]] = []  # the reorder buffer: (step, order, event)
        self.open: dict[tuple, int] = {}  # machines with a pending candidate -> the step it would be dated at
        self.seq = 0  # arrival order among held events of the same step
        self.since: dict[tuple, int] = {}  # machine -> the step its last transition was dated at
        self.urgent = False  # a non-finite event is held: release everything at the end of this step
        self.prev_active: set[str] = set()
        self.losses_seen = 0
        self.last_loss: float | None = None
        self.steps_seen = 0
        self.last_step = -1

    def set_models(self, models: list[ModelInfo]) -> None:
        self.models = {m.name: m for m in models}

    # -- plumbing

    def _machine(self, key: tuple, initial: str) -> Machine:
        m = self.machines.get(key)
        if m is None:
            m = self.machines[key] = Machine(initial, self.th.debounce, self.th.debounce_early)
        return m

    def _feed(
        self,
        key: tuple,
        initial: str,
        state: str,
        step: int,
        metrics: dict,
        etype: str,
        site: str,
        root: str | None,
        module: str | None,
    ) -> None:
        machine = self._machine(key, initial)
        for hit in machine.observe(state, step, metrics):
            self._emit(etype, site, root, module, *hit)
            self.since[key] = max(self.since.get(key, 0), hit[2])
        if machine.cand is not None:
            self.open[key] = machine.cand_step
        else:
            self.open.pop(key, None)

    def _emit(
        self, etype: str, site: str, root: str | None, module: str | None, old: str, new: str, step: int, metrics: dict
    ) -> None:
        if new == NON_FINITE and etype != EventType.data_anomaly.value:
            etype = EventType.non_finite.value
        ev = SemanticEvent(
            type=etype,
            step=step,
            module=module or None,
            root=root or None,
            from_=old,
            to=new,
            metrics=_rounded(metrics),
            site=site,
        )
        self.seq += 1
        self.held.append((step, self.seq, ev))
        self.urgent = self.urgent or new == NON_FINITE

    def pending(self) -> list[SemanticEvent]:
        """The events confirmed but still held for ordering (a live decision must not wait for them)."""
        return [ev for _, _, ev in sorted(self.held)]

    def _release(self, now: int | None) -> None:
        """Emit the held events that no later observation can precede (all of them when now is None)."""
        if not self.held:
            return
        if now is None:
            floor = math.inf
        else:
            floor = min(now, min(self.open.values(), default=now))
            for name, s in self.series.items():
                machine = self.machines.get(("loss", name))
                floor = min(
                    floor, s.earliest_onset(now, machine is not None and machine.state == LossState.diverging.value)
                )
        ready = sorted(h for h in self.held if h[0] <= floor) if floor < math.inf else sorted(self.held)
        if not ready:
            return
        self.held = [h for h in self.held if h[0] > floor]
        for _, _, ev in ready:
            self.emit(ev)

    # -- per step

    def observe(self, rec: StepRecord) -> None:
        self.steps_seen += 1
        self.last_step = rec.step
        if rec.active:
            if self.prev_active and rec.active.isdisjoint(self.prev_active):
                self._reset_loss(rec.active)  # another model took over: its loss curve starts afresh
            self.prev_active = set(rec.active)
        self._observe_data(rec)
        self._observe_acts(rec)
        self._observe_grads(rec)
        if rec.sampled:
            self._observe_weights(rec)
        losses = rec.losses or ({"": rec.loss} if rec.loss is not None else {})
        for name, loss in losses.items():
            self._observe_loss(rec.step, name, loss, alone=len(losses) == 1)
        # a non-finite value is written at once (the run may be about to crash), with all it held, sorted;
        # only a state confirmed later but dated before it can then come out of order
        self._release(None if self.urgent else rec.step)
        self.urgent = False

    def _observe_data(self, rec: StepRecord) -> None:
        for (root, _module, site), s in rec.acts.items():
            if site not in ("input", "target"):
                continue
            key = ("data", root, site)
            etype = EventType.data_anomaly.value
            if not isinstance(s, ActStats):
                if not math.isfinite(s):
                    self._feed(key, DataState.normal.value, NON_FINITE, rec.step, {"sum": s}, etype, site, root, None)
                continue
            base = self.data_base.setdefault(key, [])
            baseline = _median_pair(base) if len(base) >= self.th.baseline_samples else None
            limit = self.th.data_scale if site == "input" else self.th.target_scale
            state = classify_data(s, baseline, limit, self.th)
            if state == DataState.normal.value and len(base) < self.th.baseline_samples:
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
            baseline = statistics.median(base) if len(base) >= self.th.baseline_samples else None
            state = classify_activation(s, baseline, self.th, output_layer=module == self._output_layer(root))
            if state == ActState.normal.value and len(base) < self.th.baseline_samples and s.std > 0:
                base.append(s.std)
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
            self._feed(key, ActState.normal.value, state, rec.step, metrics, etype, site, root, module)

    def _output_layer(self, root: str) -> str | None:
        model = self.models.get(root)
        if model is None:
            return None
        layers = [n for n in model.order if n in model.modules and model.modules[n].params]
        return layers[-1] if layers else None

    def _observe_grads(self, rec: StepRecord) -> None:
        for root, model in self.models.items():
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
            self.grad_since[(root, name)] = max(value, self.grad_since.get((root, name), 0.0))
        if value is None and not (info.in_optimizer or (root, None) in self.got_grad):
            return  # not meant to train: no optimizer holds it and no part of its model gets gradients (an EMA
            # copy or a teacher called with gradients on)
        base = self.grad_base.setdefault(key, [])
        baseline = statistics.median(base) if len(base) >= self.th.baseline_samples else None
        state = classify_gradient(value, ref_max, baseline, info.weight_ndim2, depth, self.th, ahead)
        if state == GradState.healthy.value and len(base) < self.th.baseline_samples and value:
            base.append(value)
        machine = self.machines.get(key)
        if machine is not None and machine.state == state and machine.cand is None:
            return  # nothing changes (most module-steps): skip building the evidence
        metrics = {
            "rms": value,
            "ratio_to_max": (value / ref_max) if _finite(value) and ref_max else None,
            "ratio_to_median": (value / ref_median) if _finite(value) and ref_median else None,
            "baseline_rms": baseline,
        }
        self._feed(
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

    def _observe_weights(self, rec: StepRecord) -> None:
        """Per module, on sampled steps: unchanged = a module that had a gradient at some step since the last
        sample, yet whose weights are bit-identical to that sample's (the same checksum of every parameter);
        comparing samples, not one optimizer step, also catches weights that something puts back after each
        step; layers whose gradient vanished are left to the gradient classifier. Oversized = one step moves
        the weights by a large fraction of their norm (the update-to-weight ratio, healthy around 1e-3), on
        most of the model's matrix layers: the learning rate is too large. Collapsing = the weight norm fell
        below a small fraction of its first sample and is still falling, on most matrix layers (e.g. a huge
        weight_decay)."""
        th = self.th
        judged: dict[str, list[tuple]] = {}
        for (root, name), gs in rec.grads.items():
            if gs.weight_norm is None or (rec.active is not None and root not in rec.active):
                continue
            judged.setdefault(root, []).append((name, gs))
        for root, items in judged.items():
            model = self.models.get(root)
            rows = []
            for name, gs in items:
                info = model.modules.get(name) if model else None
                key = ("weights", root, name)
                first, last = self.weight_hist.get((root, name), (gs.weight_norm, gs.weight_norm))
                self.weight_hist[(root, name)] = (first, gs.weight_norm)
                ratio = (
                    gs.update_norm / gs.weight_norm
                    if gs.update_norm is not None and gs.weight_norm > 0 and math.isfinite(gs.update_norm)
                    else None
                )
                shrunk = first > 0 and gs.weight_norm < th.weight_collapse_frac * first
                machine = self.machines.get(key)
                keeps = machine is not None and UpdateState.collapsing.value in (machine.state, machine.cand)
                collapsing = shrunk and (gs.weight_norm < last or keeps)
                if ratio is not None and gs.weight_norm < last:
                    ratio_big = None  # a step that shrinks the weights is a decay, not an oversized lr step
                else:
                    ratio_big = ratio
                rows.append((name, gs, info, key, ratio, ratio_big, collapsing, first))
            matrix = [r for r in rows if r[2] is not None and r[2].weight_ndim2]
            big = sum(1 for r in matrix if r[5] is not None and r[5] > th.update_oversized)
            small = sum(1 for r in matrix if r[6])
            oversized_model = bool(matrix) and big >= th.weights_majority * len(matrix)
            collapsing_model = bool(matrix) and small >= th.weights_majority * len(matrix)
            for name, gs, info, key, ratio, ratio_big, collapsing, first in rows:
                prev = self.last_weights.get(key)
                now = self.last_weights[key] = gs.checksum
                grad = self.grad_since.pop((root, name), None)
                gmachine = self.machines.get(("grad", root, name))
                grad_ok = gmachine is None or (gmachine.state == GradState.healthy.value and gmachine.cand is None)
                if prev is not None and now is not None and grad is not None and now == prev:
                    if not grad_ok:
                        continue  # a vanishing/absent gradient explains still weights better
                    state = UpdateState.unchanged.value
                elif collapsing_model and collapsing:
                    state = UpdateState.collapsing.value
                elif oversized_model and ratio_big is not None and ratio_big > th.update_oversized:
                    state = UpdateState.oversized.value
                elif (prev is not None and now is not None and grad is not None) or ratio:
                    state = UpdateState.updating.value
                else:
                    continue  # nothing to compare, or nothing pushed it since
                metrics = {
                    "weight_norm": gs.weight_norm,
                    "first_weight_norm": first,
                    "weight_ratio": gs.weight_norm / first if first > 0 else None,
                    "update_norm": gs.update_norm,
                    "update_ratio": ratio,
                    "grad_rms": grad,
                    "layers_frac": (big if state == UpdateState.oversized.value else small) / len(matrix)
                    if matrix
                    else None,
                    "in_optimizer": float(bool(info and info.in_optimizer)),
                }
                self._feed(
                    key,
                    UpdateState.updating.value,
                    state,
                    rec.step,
                    metrics,
                    EventType.parameter_update.value,
                    "weights",
                    root,
                    name,
                )

    def _reset_loss(self, active: set[str]) -> None:
        """Loss series of models no longer trained are dropped: a new model's curve starts afresh."""
        for name in [n for n in self.series if n not in active]:
            del self.series[name]
            machine = self.machines.get(("loss", name))
            if machine is not None:
                machine.state, machine.cand, machine.count = LossState.normal.value, None, 0
            self.open.pop(("loss", name), None)
            self.since.pop(("loss", name), None)

    def _observe_loss(self, step: int, name: str, loss: float, alone: bool) -> None:
        key = ("loss", name)
        etype = EventType.optimizer_instability.value
        self.last_loss = loss
        if not math.isfinite(loss):
            self._feed(key, LossState.normal.value, NON_FINITE, step, {"loss": loss}, etype, "loss", name, None)
            return
        self.losses_seen += 1
        series = self.series.get(name)
        if series is None:
            series = self.series[name] = LossSeries(self.th)
            if self.main_series is None:
                self.main_series = series
        series.alone = series.alone and alone
        state, onset, metrics = series.add(step, loss)
        machine = self.machines.get(key)
        if machine is not None and machine.state == state and machine.cand is None:
            return  # nothing changes (most steps)
        # a state dated back (a rise's change point, a plateau's stretch) begins no earlier than the last one
        onset = max(0, onset, self.since.get(key, 0))
        self._feed(key, LossState.normal.value, state, onset, metrics, etype, "loss", name, None)

    def finish(self) -> None:
        """End of run: confirm states cut short by the end, release every held event, then one summary."""
        for key, machine in self.machines.items():
            hit = machine.pending()
            if hit is None:
                continue
            etype, site, root, module = _describe(key)
            self._emit(etype, site, root, module, *hit)
        self.open.clear()
        self._release(None)
        main = self.main_series
        metrics = {
            "steps": float(self.steps_seen),
            "losses": float(self.losses_seen),
            "first_loss": statistics.median(main.first) if main and main.first else None,
            "best_loss": main._x(main.best) if main and math.isfinite(main.best) else None,
            "last_loss": self.last_loss,
        }
        self.emit(
            SemanticEvent(
                type=EventType.run_summary.value,
                step=max(self.last_step, 0),
                module=None,
                from_=RUN_STATES[0],
                to=RUN_STATES[1],
                metrics=_rounded(metrics),
                site="run",
            )
        )


def _describe(key: tuple) -> tuple[str, str, str | None, str | None]:
    kind = key[0]
    if kind == "grad":
        return EventType.gradient_health_transition.value, "gradient", key[1], key[2]
    if kind == "act":
        return EventType.activation_regime_shift.value, key[3], key[1], key[2]
    if kind == "data":
        return EventType.data_anomaly.value, key[2], key[1], None
    if kind == "weights":
        return EventType.parameter_update.value, "weights", key[1], key[2]
    return EventType.optimizer_instability.value, "loss", key[1] or None, None


def _median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)

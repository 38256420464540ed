"""The loss model: one loss series judged as a noisy process (see LossSeries), in three parts: its running
statistics (LossStatistics), the oscillation test (OscillationTest) and the states. Pure, no torch."""

from __future__ import annotations

import math
import statistics
from bisect import bisect_left, insort
from collections import deque
from typing import Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.trace.events import LossState

# the states as plain strings (judged every step: an Enum's `.value` is a descriptor call)
NORMAL, PLATEAU, DIVERGING, OSCILLATING = (
    LossState.normal.value,
    LossState.plateau.value,
    LossState.diverging.value,
    LossState.oscillating.value,
)


def _median_sorted(s: list[float]) -> float:
    """statistics.median of values already sorted (the same arithmetic, the same error when there are none)."""
    if not s:
        raise statistics.StatisticsError("no median for empty data")
    h = len(s) // 2
    return s[h] if len(s) % 2 else (s[h - 1] + s[h]) / 2


def _kth_deviation(s: list[float], mid: float, k: int) -> float:
    """The k-th smallest (from 0) of abs(v - mid) over the sorted values `s`: the k + 1 values nearest `mid`
    are a window of `s`, found by bisection; the k-th deviation is the larger of its two ends'. Exactly the
    value sorting all deviations gives (a deviation below mid is computed as mid - v, the same float)."""
    m = k + 1
    lo, hi = 0, len(s) - m
    while lo < hi:
        i = (lo + hi) // 2
        if mid - s[i] > s[i + m] - mid:
            lo = i + 1
        else:
            hi = i
    return max(abs(s[lo] - mid), abs(s[lo + m - 1] - mid))


def _mad(s: list[float]) -> float:
    """statistics.median([abs(d - mid) for d in s]), mid the median of the sorted finite values `s`, without
    building and sorting the deviations (the loss noise is read every step)."""
    n = len(s)
    h = n // 2
    if n % 2:
        return _kth_deviation(s, s[h], h)
    mid = (s[h - 1] + s[h]) / 2
    return (_kth_deviation(s, mid, h - 1) + _kth_deviation(s, mid, h)) / 2


class LossStatistics:
    """The running statistics of one loss series, which the tests (LossSeries, OscillationTest) read. Apart from
    them: they are kept on every loss whatever is judged, each updated as values come and go (sorted copies),
    not recomputed over its window, and must equal what recomputing gives (tests/reason/test_loss_model.py).

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
    _start: float  # set by LossSeries.observe: min(first loss, median of the first few), raw

    def __init__(self, th: Thresholds) -> None:
        self.th = th
        self.raw = False  # judged on raw values (a loss <= 0 was seen)
        self.negative = False  # a loss < 0 was seen: no floor at 0 (an exact 0 is a perfect fit, still floored)
        self.hist: deque[tuple[int, float]] = deque(maxlen=2 * th.loss_window)  # (step, raw loss)
        self.first: list[float] = []  # the first loss_level_window losses, raw
        self.first_step = 0
        self.n = 0
        self.last: float | None = None
        self._restart()

    def _restart(self) -> None:
        """(Re)build the judged statistics from the raw history (after switching to raw values)."""
        past, self.best, self.best_noise = list(self.hist), math.inf, None
        self.cusum, self.rise_from, self._noise, self.prev_y, self.learned = 0.0, None, None, None, None
        self.late: deque[float] = deque(maxlen=self.th.plateau_min_losses)  # the latest judged values
        # the same, sorted in two parts as they come and go: the newer (late - late // 2 values) and the older
        # ones; once `late` is full, its halves as the plateau test splits them (see _keep_late)
        self.late_old: list[float] = []
        self.late_new: list[float] = []
        self._improved = False
        self.diffs: deque[float] = deque(maxlen=self.th.loss_noise_window)  # judged step-to-step differences
        self.sorted_diffs: list[float] = []  # the same, sorted (kept so as they come and go: see noise)
        # for the oscillation test's cheap exit, kept as the history fills: |raw loss|, |raw step-to-step change|
        self.sizes: deque[float] = deque(maxlen=self.hist.maxlen)
        self.swings: deque[float] = deque(maxlen=(self.hist.maxlen or 1) - 1)
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
        diffs, ordered = self.diffs, self.sorted_diffs
        if len(diffs) < self.th.loss_noise_min:
            return None
        if math.isfinite(ordered[0]) and math.isfinite(ordered[-1]):
            mad = _mad(ordered)
        else:  # an infinite difference: inf - inf is NaN, whose place in a sort depends on the order it is given
            mid = statistics.median(diffs)
            mad = statistics.median([abs(d - mid) for d in diffs])
        return 1.4826 * mad / math.sqrt(2)

    def _update(self, step: int, loss: float) -> None:
        hist = self.hist
        if hist:
            self.swings.append(abs(loss - hist[-1][1]))
        hist.append((step, loss))
        self.sizes.append(abs(loss))
        y = self._y(loss)
        if self.prev_y is not None:
            diffs, ordered, d = self.diffs, self.sorted_diffs, y - self.prev_y
            if diffs.maxlen:
                if len(diffs) == diffs.maxlen:
                    del ordered[bisect_left(ordered, diffs[0])]  # the one the deque drops
                insort(ordered, d)
            diffs.append(d)
        self.prev_y = y
        self._keep_late(y)
        self.levels.append(y)
        level = self.level = _median_sorted(sorted(self.levels))
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

    def _keep_late(self, y: float) -> None:
        """Append y to `late`, and to its sorted halves: the value that leaves the newer half joins the older
        one, the value the deque drops leaves the older one."""
        late, old, new = self.late, self.late_old, self.late_new
        m, size = len(late), late.maxlen or 0
        newer = size - size // 2
        if size:
            insort(new, y)
            if m >= newer:
                crossing = late[m - newer]
                del new[bisect_left(new, crossing)]
                insort(old, crossing)
                if m == size:
                    del old[bisect_left(old, late[0])]
        late.append(y)

    def _late_median(self) -> float:
        """statistics.median(self.late), from its sorted halves once it is full."""
        if len(self.late) == self.late.maxlen:
            return _median_sorted(sorted(self.late_old + self.late_new))  # two sorted runs: a merge
        return statistics.median(self.late)

    def start(self) -> float:
        """The loss at initialisation, unless the first few are lower (a blow-up right away must not make
        everything after it look like progress)."""
        return self._y(self._start)


class OscillationTest(LossStatistics):
    """The oscillation test, with what it alone reads: the chance level of a class loss (a model worse than
    guessing) and the change point that dates a swing. Apart from the other states' tests because it measures
    the raw history's window (swings against the loss's size and its start), not the judged level."""

    def __init__(self, th: Thresholds) -> None:
        super().__init__(th)
        self.chance: float | None = None  # ln(classes) of the class loss that made this series (the loss observer)
        self.alone = True  # never reported in the same step as another series (a GAN's G and D: a game)

    def _oscillating(self, start_y: float) -> tuple[int, dict[str, Any]] | None:
        """Large swings relative to the loss level over the latest 2 windows, with frequent sign changes,
        while the loss has not learned, or keeps jumping back above where it started. Judged over a rolling
        window, so an oscillation that settled goes back to normal. Only for a series that never went below 0
        (an exact 0, a perfect fit, is still floored there): every test here measures swings against the
        loss's size and its start ("3x where it started", "back above its start"), which presumes a floor at
        0. A loss that can be negative has no floor and an arbitrary offset: a policy-gradient surrogate
        sum(-log_prob * normalised return) changes sign from episode to episode and its size follows the
        episode's length, by design; its swings against a level near 0 are unbounded ratios that say nothing
        (the same reason the plateau test skips it). Such a series is still judged for divergence (a rise
        beyond its noise, or a fall without bound)."""
        w = self.th.loss_window
        if self.negative or not self.alone or len(self.hist) < 2 * w:
            return None  # (a game's payoff swings by design: see LossSeries._judge)
        swing = sum(self.swings) / len(self.swings)  # the mean |change| over the history
        if swing <= self.th.oscillation * min(self.sizes):
            return None  # cheap exit (most steps): below the threshold even against the smallest loss
        recent = [v for _, v in self.hist]
        diffs = [b - a for a, b in zip(recent, recent[1:])]
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
        # swings that recur: the large changes turn back at least twice (up, down, up). One spike and its fall
        # back (a first step's overshoot the run recovers from) turn once, however noisy the steps around them
        big = [d for d in diffs if abs(d) > th.oscillation * level]
        recurs = sum(1 for a, b in zip(big, big[1:]) if a * b < 0) >= 2
        if not (
            (
                flips >= th.oscillation_flips
                and recurs
                and now > learned_level
                and max(recent) > th.oscillation_high * start
            )
            or (
                start > 0
                and above >= th.oscillation_jumps
                and best is not None
                and best < learned_level
                and flips >= th.oscillation_flips_learned
            )
            or (self._worse_than_guessing() >= th.oscillation_jumps and flips >= th.oscillation_flips_learned)
        ):
            return None
        return self._change_point(), {"low": min(recent), "high": max(recent), "swing": rel}

    def _chance(self) -> float | None:
        """ln(C) of the class loss that made this series, where the series started near it (0.5-1.5x): a
        series that is not that loss alone (a sum of terms, a scaled loss) is not measured against it."""
        chance = self.chance
        if chance is None or self.raw or not self.first or not 0.5 * chance <= self._start <= 1.5 * chance:
            return None
        return chance

    def _worse_than_guessing(self) -> int:
        """How many losses of the window lie above chance: chance_jump times ln(C) for a series made by one
        class loss over C classes. Why: guessing every class equally likely scores ln(C), so a loss above it is
        a model confidently wrong, which training at a sane step size does not do once past its first steps
        (the first loss_window are the fresh model's transient, not counted). See _chance."""
        chance = self._chance()
        if chance is None:
            return 0
        settled = self.first_step + self.th.loss_window
        return sum(1 for s, v in self.hist if s >= settled and v > self.th.chance_jump * chance)

    def _change_point(self) -> int:
        """Where an oscillation began within its window: the first step whose change from the step before it
        leaves the in-control band (loss_diverge_sigma noise widths, on the judged scale: the noise the series
        had when it reached its best, or now, whichever is larger). Why: the window that confirms a swing
        reaches back 2 windows, over steps that may be the healthy run's own (a warm-up bump); the problem
        began where the series first moved more than its noise explains. A series swinging from its first
        step has a noise as large as its swings: no step stands out, the window's start is the date."""
        noise = max(self._noise or 0.0, self.best_noise or 0.0)
        steps = list(self.hist)
        if noise > 0:
            band = self.th.loss_diverge_sigma * noise
            for (_, a), (step, b) in zip(steps, steps[1:]):
                if abs(self._y(b) - self._y(a)) > band:  # (history is on one scale: see _restart)
                    return step
        # the series' very first loss alone swings nowhere: its first change is to the second loss
        return steps[1][0] if steps[0][0] == self.first_step and len(steps) > 1 else steps[0][0]


class LossSeries(OscillationTest):
    """One loss series judged as a noisy process (statistical process control, not step counts): each finite
    loss updates its statistics (LossStatistics), then is judged diverging (a rise beyond its noise, or a fall
    without bound), oscillating (OscillationTest), on a plateau, or normal; `metrics` says why."""

    def __init__(self, th: Thresholds) -> None:
        super().__init__(th)
        self.fall_from: int | None = None  # first step of the latest stretch below the mirror of its start
        self._extra: dict[str, Any] | None = None  # the latest judgement's own metrics (see metrics)
        # the entropy of the class loss's labels seen so far (the loss observer): what predicting each class at
        # its frequency scores, the best a model that ignores its inputs can do
        self.prior: float | None = None
        self.prior_since: int | None = None  # the step its latest window's median came within prior_band of it

    def add(self, step: int, loss: float) -> tuple[str, int, dict[str, Any]]:
        """A finite loss: returns (state, onset step, metrics)."""
        state, onset = self.observe(step, loss)
        return state, onset, self.metrics()

    def observe(self, step: int, loss: float) -> tuple[str, int]:
        """A finite loss: returns (state, onset step); `metrics` says why, until the next loss."""
        if self.n == 0:
            self.first_step = step
        self.n += 1
        self.last = loss
        if len(self.first) < self.th.loss_level_window:
            self.first.append(loss)
            self._start = min(self.first[0], statistics.median(self.first))
        if loss < 0:
            self.negative = True
        if loss <= 0 and not self.raw:
            self.raw = True
            self._restart()
        if loss < self._start - 2 * abs(self._start):
            self.fall_from = step if self.fall_from is None else self.fall_from
        else:
            self.fall_from = None
        self._update(step, loss)
        return self._judge(step)

    def _above_chance(self, level: float) -> bool:
        """A class loss trained alone whose level (a rolling median: no one batch) is diverge_factor times its
        chance level ln(C): guessing every class equally likely scores ln(C), so a model that starts there and
        scores twice that predicts the true class with a probability of C^-2 or less, confidently wrong, which
        only steps far too large (or a bug) do to it. Unstable, not diverging: a runaway rise is the rise test's
        (its steps are regular, its noise small); this is the rise whose jumps inflate the very noise it is
        measured against (mingPT at lr 0.5: 3.9 -> 21 -> 12 -> 30 in 5 steps, a 7x rise within 6 widths of its
        own swings; an MLP at Adam lr 0.5 swinging 1.5-14 against ln 4), before an oscillation can be judged
        over its window. The chance level needs no noise."""
        chance = self._chance()
        return self.alone and chance is not None and level > self._y(self.th.diverge_factor * chance)

    def _falls_without_bound(self) -> float | None:
        """How many times its start's size a loss fell below zero, when that is orders of magnitude
        (diverge_fall_factor): a loss that keeps falling has no lower bound (a sign error, e.g. a KL term
        subtracted; a loss that rewards unbounded outputs), and is diverging downwards. Why: divergence is
        usually growth, but |loss| growing with a negative sign is the same runaway; a positive loss (NLL,
        MSE, BCE) can never go below 0 at all. Dated where it fell below the mirror image of its start
        (start - 2|start|: -start for a positive loss). Only for a series trained alone: a game's payoff (a
        WGAN critic's) can run negative by design."""
        if not self.alone or self.fall_from is None or self.last is None or not self.first:
            return None
        scale = max(abs(self._start), 1e-12)
        level = self._x(self.level)
        if level is None or level >= 0 or -level < self.th.diverge_fall_factor * scale:
            return None
        return -level / scale

    def improved(self, noise: float | None) -> bool:
        """The loss learned since the start, meaningfully and significantly: the median of its latest k values
        is plateau_improvement below the start level, by more than plateau_sigma standard errors (medians of
        m1 and m2 values of noise s differ by s*sqrt(pi/2*(1/m1+1/m2)) by chance). Once true it stays true: a
        loss that learned and rose again is judged by the divergence test, not as a plateau."""
        if self._improved or self.n < 2:
            return self._improved
        k = max(1, min(self.th.plateau_min_losses, self.n // 2))
        late = self._late_median() if k >= len(self.late) else statistics.median(list(self.late)[-k:])
        gain = self.reference() - late
        se = (noise or 0.0) * math.sqrt(math.pi / 2 * (1 / len(self.first) + 1 / k))
        self._improved = gain > max(-self._factor(1 - self.th.plateau_improvement), self.th.plateau_sigma * se)
        return self._improved

    def reference(self) -> float:
        """What learning is measured from: the start, or the chance level ln(C) of a class loss that started
        above it. Why: a classifier whose first loss is far above guessing (a blow-up at initialisation) and
        falls to ln(C) has learned nothing (it predicts every class equally likely); its fall from the
        blow-up is not progress."""
        start = self.start()
        if self.chance is None or self.raw:
            return start
        return min(start, math.log(self.chance))

    def metrics(self) -> dict[str, Any]:
        """The evidence of the latest judgement (built only when it is reported: most steps change nothing)."""
        noise = self._noise
        metrics: dict[str, Any] = {
            "loss": self.last,
            "start": self._x(self.start()),
            "best": self._x(self.best),
            "recent": self._x(self.level),
            "noise": max(noise or 0.0, self.best_noise or 0.0) if noise is not None else None,
        }
        if self._extra:
            metrics.update(self._extra)
            if "improvement" in self._extra:
                metrics["improvement"] = 1 - math.exp(self._late_median() - self.reference())
                if self.reference() < self.start():
                    metrics["chance"] = self.chance
                elif self.chance is not None and not self.raw:
                    metrics["chance_level"] = self.chance  # ln(C), which the loss started at or below
        return metrics

    def _judge(self, step: int) -> tuple[str, int]:
        th = self.th
        start, level, noise = self.start(), self.level, self._noise
        ref_noise = max(noise or 0.0, self.best_noise or 0.0)
        self._extra = None
        # diverging: the level rose a factor above its best, beyond what the series' own noise explains;
        # before the noise is known, only a rise by the early factor (10x) counts
        rise = level - self.best
        # a game's payoff (GAN, actor-critic: models trained against each other in the same steps) rises
        # as the other side improves: only a rise by the early factor is divergence there, and from where it
        # started (a discriminator that wins early dips near 0 and climbs back as the generator catches up; one
        # side winning outright takes the other's payoff far above its start). Its swings are the game's own,
        # no oscillation
        if not self.alone:
            rise = level - max(self.best, start)
        if noise is None or not self.alone:
            need = max(self._factor(th.diverge_early_factor), th.loss_diverge_sigma * ref_noise)
        else:
            need = max(self._factor(th.diverge_factor), th.loss_diverge_sigma * ref_noise)
        if rise > need:
            self._extra = {"rise_factor": math.exp(rise) if not self.raw else None}
            return DIVERGING, self.rise_from if self.rise_from is not None else step
        fall = self._falls_without_bound()
        if fall is not None and self.fall_from is not None:
            self._extra = {"fall_factor": fall}
            return DIVERGING, self.fall_from
        osc = self._oscillating(start)
        if osc is not None:
            self._extra = osc[1]
            return OSCILLATING, osc[0]
        if self._above_chance(level):
            recent = [v for _, v in self.hist]
            swing = sum(self.swings) / len(self.swings) if self.swings else 0.0
            rel = swing / (statistics.median(abs(v) for v in recent) or 1.0)
            self._extra = {"low": min(recent), "high": max(recent), "swing": rel, "chance_level": self.chance}
            return OSCILLATING, self._change_point()
        if self.plateau(noise):
            self._extra = {"improvement": None}  # filled in by metrics: only a reported plateau reads it
            return PLATEAU, max(self.first_step, step - th.plateau_min_losses + 1)
        if self.at_prior(step, noise):
            self._extra = {"improvement": None, "prior": self.prior}
            return PLATEAU, max(self.first_step, min(self.prior_since or step, step - th.plateau_min_losses + 1))
        return NORMAL, step

    def at_prior(self, step: int, noise: float | None) -> bool:
        """A class loss held at its labels' entropy (within prior_band), quiet and not falling, for a plateau's
        length, whatever it fell from: the model predicts each class at its frequency and nothing from its
        inputs (an output read at a position every sample shares, inputs shuffled apart from their labels, an
        input that never reaches the head). A model that uses its inputs, however weakly, scores below it."""
        th = self.th
        if self.prior is None or self.raw or not self.alone or self.n < th.plateau_min_losses or noise is None:
            return False
        k = min(th.plateau_min_losses, len(self.late))
        level = self._x(statistics.median(list(self.late)[-k:]))
        if level is None or abs(level - self.prior) > th.prior_band * self.prior:
            self.prior_since = None
            return False
        if self.prior_since is None:  # dated where the window that first sat there began
            self.prior_since = max(self.first_step, step - k + 1)
        # not on its way below it: at the pace of its latest window (its halves' medians lie h steps apart) it
        # would not get prior_band under the prior within plateau_horizon times the losses seen so far (a loss
        # creeping onto the prior is a model converging to the constant prediction)
        h = len(self.late) // 2
        late = list(self.late)
        later = statistics.median(late[h:])
        fall = statistics.median(late[:h]) - later
        gap = later - self._y(self.prior * (1 - th.prior_band))
        return fall / max(1, h) * th.plateau_horizon * self.n < gap

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
        h = len(self.late) // 2
        se = noise * math.sqrt(math.pi / 2 * 2 / max(1, h))
        if len(self.late) == self.late.maxlen:  # its halves are kept sorted
            earlier, later = _median_sorted(self.late_old), _median_sorted(self.late_new)
        else:
            late = list(self.late)
            earlier, later = statistics.median(late[:h]), statistics.median(late[h:])
        fall = earlier - later
        if fall <= self.th.plateau_sigma * se:
            return True
        # falling beyond its noise, but too slowly to matter: at that pace (the halves' medians lie h steps
        # apart) it would not fall to the improvement that counts within plateau_horizon times the losses
        # seen so far. Why: a full-batch loss has almost no noise, so a creep of 1e-5 per step held at a
        # level by weight decay is as significant as a real descent
        gap = -self._factor(1 - self.th.plateau_improvement) - (self.reference() - later)
        return fall / max(1, h) * self.th.plateau_horizon * self.n < gap

    def earliest_onset(self, step: int, diverged: bool) -> int:
        """The earliest step a later state of this series could be dated at (diverged: already confirmed,
        so a rise under way can date nothing new)."""
        onset = step - 2 * self.th.loss_window  # an oscillation is dated at its window's start
        if self.alone and not self.raw and not self.improved(self._noise):
            onset = min(onset, step - self.th.plateau_min_losses + 1)  # a plateau may still be recognised
        if self.prior_since is not None and not diverged:
            onset = min(onset, self.prior_since)  # a plateau at the prior may still be recognised
        if self.rise_from is not None and not diverged:
            onset = min(onset, self.rise_from)
        if self.fall_from is not None and not diverged:
            onset = min(onset, self.fall_from)
        return onset

"""Loss function misuse: a loss called wrongly, read at each loss call of a sampled step (lossprobe.py).

States (LossCallState), one debounced machine per loss name:
- broadcast: an elementwise loss (mse_loss, l1_loss, ...) whose target broadcasts against the input to another
  shape ([N, 1] against [N] -> [N, N]): every prediction is fitted to every target, the loss stalls at the
  targets' variance (torch only warns);
- probabilities_to_ce: cross_entropy fed rows in [0, 1] summing to 1 (a softmax before it): it applies
  log_softmax itself, so the gradient is squashed and the loss stalls well above 0;
- probabilities_to_logits_loss: binary_cross_entropy_with_logits fed values all in [0, 1] (a sigmoid before it);
- logits_to_nll: a loss that takes log-probabilities (nll_loss, kl_div, ctc_loss) fed values above 0: raw
  scores, and -x[target] falls without bound (ctc_loss: its gradient assumes normalised log-probabilities);
- probabilities_to_nll: the same losses fed probabilities (softmax where log_softmax belongs);
- sum_reduction: reduction="sum" over many terms: every gradient is that many times the mean's (a cause only
  together with an unstable, diverging loss or exploding gradients).
Class targets out of range are not judged: torch raises on them by itself.

The event carries no loss name in a string field (the event's `module` is a model's module, and a loss is
none): `loss_id` indexes LOSS_NAMES (append only), shapes are `input_0`, `input_1`, ... metrics."""

from __future__ import annotations

import math
from collections import deque
from typing import Any

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.base import Board, Family, Observer
from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.reason.families.evidence import _hyp
from neuraldbg_cli.reason.families.loss_model import _mad, _median_sorted
from neuraldbg_cli.trace.events import EventType, Hypothesis, Kind, LossCallState, LossCallStats, Origin, StepRecord
from neuraldbg_cli.vocab import adaptive

S = LossCallState
SITE = "loss_call"
# the losses lossprobe reads, by number in the events (`loss_id`): append only, a trace keeps the numbers
LOSS_NAMES = (
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "poisson_nll_loss",
    "gaussian_nll_loss",
    "cross_entropy",
    "nll_loss",
    "ctc_loss",
)
_IDS = {name: i for i, name in enumerate(LOSS_NAMES)}
MODULES = {  # the loss module that calls each
    "mse_loss": "MSELoss",
    "l1_loss": "L1Loss",
    "smooth_l1_loss": "SmoothL1Loss",
    "huber_loss": "HuberLoss",
    "binary_cross_entropy": "BCELoss",
    "binary_cross_entropy_with_logits": "BCEWithLogitsLoss",
    "kl_div": "KLDivLoss",
    "poisson_nll_loss": "PoissonNLLLoss",
    "gaussian_nll_loss": "GaussianNLLLoss",
    "cross_entropy": "CrossEntropyLoss",
    "nll_loss": "NLLLoss",
    "ctc_loss": "CTCLoss",
}
LOG_PROB_LOSSES = ("nll_loss", "kl_div", "ctc_loss")  # their input is log-probabilities
HALF = ("float16", "bfloat16")
SQUASHING = frozenset({"Sigmoid", "Softmax", "Hardsigmoid", "Clamp", "ClampMin", "ClampMax"})  # outputs in [0, 1]
LOG_OUTPUTS = frozenset({"LogSoftmax", "LogSigmoid"})
MIN_VALUES = 16  # values a [0, 1] range alone is judged on: one or two logits may well lie in [0, 1] by chance
MISUSE = tuple(s.value for s in S if s is not S.normal)
UNSEEN_STEP = 0.45  # a summed loss under a manual update (no optimizer): a note below presence (see loss_misuse)
# how sure each state is that the loss is called wrongly (sum_reduction: see loss_misuse)
CONFIDENCE = {
    S.broadcast.value: 0.9,
    S.probabilities_to_ce.value: 0.88,
    S.probabilities_to_logits_loss.value: 0.85,
    S.logits_to_nll.value: 0.9,
    S.probabilities_to_nll.value: 0.85,
    S.sum_reduction.value: 0.6,
    S.negated.value: 0.85,
    S.unbounded.value: 0.75,
}
UNSTABLE = ("diverging", "oscillating")  # loss states under which a summed reduction is a cause
# losses that are never below 0 whatever their input (a misused log-probability loss can be: see logits_to_nll)
NON_NEGATIVE = frozenset(
    {
        "mse_loss",
        "l1_loss",
        "smooth_l1_loss",
        "huber_loss",
        "binary_cross_entropy",
        "binary_cross_entropy_with_logits",
        "cross_entropy",
    }
)
NEGATED_FALL = 3.0  # a negative loss that fell to this many times its first value keeps falling: it is maximised
DIP_SHARE = 0.25  # at most this share of a loss's values below 0 are dips (more: the loss sits there, see _Dips)
DIP_DEPTH = 0.5  # a dip this deep below 0, in units of the loss's usual (median positive) level, is no rounding
DIP_SIGMA = 6.0  # ... and this many robust spreads of its positive values below their median: no tail of theirs
POSITIVE_KEPT = 256  # the latest positive values a loss's usual level and spread are read from
DIPS_KEPT = 64  # the latest dips kept for dating (every dip still counts)


def classify_loss_call(s: LossCallStats, th: Thresholds) -> str:
    """Pure: one loss call's statistics -> a LossCallState value. The shapes decide `broadcast` exactly; the
    value tests read the input's range (an evenly spread sample) and its row sums (a few leading rows)."""
    if s.broadcast_shape is not None:
        return S.broadcast.value
    n = math.prod(s.input_shape)
    lo, hi = s.min, s.max
    row_tol = th.loss_row_tol * (16 if s.dtype in HALF else 1)
    in_unit = lo >= 0 and hi <= 1  # False for NaN
    unit = n >= MIN_VALUES and in_unit
    # rows that all sum to 1 with every value in [0, 1] are probabilities however few values there are: logits hit
    # a row sum of 1 within the tolerance by chance about once in a thousand rows, on every sampled step
    rows_one = in_unit and s.row_sum_dev is not None and s.row_sum_dev <= row_tol
    # where the input comes from decides when it is known (a sigmoid's output, or logits that happen to lie in
    # [0, 1] near initialisation: a GAN discriminator's); the range test stands in only without a graph
    made = s.source
    squashed = made in SQUASHING if made is not None else unit
    if s.name == "cross_entropy" and (s.classes or 0) >= 2 and rows_one and made not in LOG_OUTPUTS:
        return S.probabilities_to_ce.value
    if s.name == "binary_cross_entropy_with_logits" and unit and squashed:
        return S.probabilities_to_logits_loss.value
    if s.name in LOG_PROB_LOSSES:
        if (s.classes or 0) >= 2 and rows_one:
            return S.probabilities_to_nll.value
        if hi > th.loss_logprob_tol:
            return S.logits_to_nll.value
    if s.reduction == "sum" and s.terms >= th.loss_sum_terms:
        return S.sum_reduction.value
    return S.normal.value


def _metrics(s: LossCallStats) -> dict[str, Any]:
    m: dict[str, Any] = {"loss_id": _IDS.get(s.name, -1), "as_module": float(s.module is not None)}
    for prefix, shape in (("input", s.input_shape), ("target", s.target_shape), ("broadcast", s.broadcast_shape)):
        for i, d in enumerate(shape or ()):
            m[f"{prefix}_{i}"] = d
    m.update(min=s.min, max=s.max, row_sum_dev=s.row_sum_dev, classes=s.classes, terms=s.terms)
    m["sum_reduction"] = float(s.reduction == "sum")
    return m


class _Dips:
    """One loss series' excursions below 0 (runs of consecutive negative values) and its latest positive values:
    what tells a term without a lower bound from a loss that sits below 0. Bounded whatever the run's length."""

    def __init__(self) -> None:
        self.n = 0
        self.negative = 0
        self.count = 0  # dips so far
        self.deepest: tuple[float, int] = (0.0, 0)  # the deepest value below 0 and its step
        self.starts: deque[int] = deque(maxlen=DIPS_KEPT)  # the first step of each of the latest dips
        self.positive: deque[float] = deque(maxlen=POSITIVE_KEPT)  # the latest values >= 0: the usual level
        self.below = False  # the latest value was < 0
        self.fresh = False  # a value < 0 came since the last judgement (only a new dip can prove anything)
        self.found: tuple[int, dict[str, Any]] | None = None

    def add(self, step: int, loss: float) -> None:
        self.n += 1
        if loss >= 0:
            self.positive.append(loss)
            self.below = False
            return
        self.negative += 1
        self.fresh = True
        if not self.below:
            self.count += 1
            self.starts.append(step)
        if loss < self.deepest[0]:
            self.deepest = (loss, step)
        self.below = True

    def unbounded(self, since: int) -> tuple[int, dict[str, Any]] | None:
        """Dips below 0 that recur (2 or more), a minority of the values (DIP_SHARE), the deepest at least
        DIP_DEPTH times the loss's usual level below 0 and an outlier of its positive values (DIP_SIGMA robust
        spreads below their median): dated at the first dip from `since` on. Why: a loss made of terms that
        are each bounded below by 0 cannot go below 0; one that sits at a steady positive level and dips far
        under 0 now and then has a term that is unbounded below on some batches: a ratio whose denominator
        passes through 0 (a Dice or IoU score of raw logits, whose sums can be any sign), a log of a value
        that reaches 0. A term negative by design moves the loss otherwise: an entropy bonus or a learned
        log-variance takes it below 0 smoothly as it trains, and it stays there; a policy-gradient surrogate
        summed over episodes spreads its positive values over orders of magnitude, its dips within them."""
        if self.found is not None or not self.fresh:
            return self.found
        self.fresh = False
        if self.count < 2 or not self.positive or self.negative > DIP_SHARE * self.n:
            return None
        ordered = sorted(self.positive)
        level, spread = _median_sorted(ordered), 1.4826 * _mad(ordered)
        deepest, at = self.deepest
        if -deepest < DIP_DEPTH * level or level - deepest < DIP_SIGMA * spread:
            return None
        first = next((s for s in self.starts if s >= since), self.starts[-1])
        metrics = {
            "dips": self.count,
            "deepest": deepest,
            "deepest_step": at,
            "level": level,
            "samples": self.n,
            "negative": self.negative,
        }
        self.found = first, metrics
        return self.found


class LossCallObserver(Observer):
    """Per sampled step: the first call of each loss, classified; one machine per loss name. And the sign of
    the loss the backward pass minimises (see _negated), and its dips below 0 (see _Dips)."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.criteria: set[str] = set()  # every loss called (reduced) on a sampled step so far
        self.mixed = False  # some loss was called unreduced (weighted per sample: an RL policy loss)
        self.first: dict[str, tuple[int, float]] = {}  # series -> its first (step, loss) while all were negative
        self.positive: set[str] = set()  # series that were ever >= 0
        self.dips: dict[str, _Dips] = {}

    def _bounded_below(self) -> bool:
        """Every loss the script called is reduced and never below 0: the sum it minimises cannot be either,
        unless the script adds a term of its own."""
        return not self.mixed and bool(self.criteria) and self.criteria <= NON_NEGATIVE

    def floor(self, now: int) -> int:
        """A dip below 0 is dated where it was, once later dips prove the loss unbounded: events are held
        back from the first unproven dip, for up to plateau_min_losses steps."""
        if not self._bounded_below():
            return now
        since = now - self.th.plateau_min_losses
        pending = [d.starts for d in self.dips.values() if d.found is None]
        return min((s for starts in pending for s in starts if s >= since), default=now)

    def observe(self, rec: StepRecord) -> None:
        etype = EventType.loss_call_health.value
        for name, s in rec.loss_calls.items():
            state = classify_loss_call(s, self.th)
            self.board.feed(("lossfn", name), S.normal.value, state, rec.step, _metrics(s), etype, SITE, None, None)
            self.criteria.add(name)
            self.mixed |= s.reduction == "none"
        for series, loss in rec.losses.items():
            if not math.isfinite(loss):
                continue
            self.dips.setdefault(series, _Dips()).add(rec.step, loss)
            if series in self.positive:
                continue
            if loss >= 0:
                self.positive.add(series)
                self.first.pop(series, None)
            else:
                self.first.setdefault(series, (rec.step, loss))
        if rec.loss_calls:
            for key, bad, found in (
                ("sign", S.negated.value, self._negated(rec)),
                ("bound", S.unbounded.value, self._unbounded(rec.step)),
            ):
                at, metrics = found or (rec.step, {})
                state = bad if found else S.normal.value
                self.board.feed(("lossfn", key), S.normal.value, state, at, metrics, etype, SITE, None, None)

    def _unbounded(self, step: int) -> tuple[int, dict[str, Any]] | None:
        """A loss series made of losses never below 0 that dips below 0 (see _Dips.unbounded)."""
        if not self._bounded_below():
            return None
        for series in sorted(self.dips):
            found = self.dips[series].unbounded(step - self.th.plateau_min_losses)
            if found is not None:
                name = min(self.criteria)
                return found[0], {"loss_id": _IDS.get(name, -1), **found[1]}
        return None

    def _negated(self, rec: StepRecord) -> tuple[int, dict[str, Any]] | None:
        """A loss series that was negative at every step and fell to NEGATED_FALL times its first value, while
        every loss the script called is one that is never below 0 (cross-entropy, MSE, L1, BCE), reduced to a
        number: only a minus sign (or a subtracted term) can have made it negative, and a falling negative loss
        is that criterion rising: training maximises it. Unreduced losses weighted per sample (a policy
        gradient's advantages) can be negative by design: not judged."""
        if not self._bounded_below():
            return None
        for series, (step, first) in self.first.items():
            now = rec.losses.get(series)
            if now is not None and math.isfinite(now) and now <= NEGATED_FALL * first:
                name = min(self.criteria)
                call = rec.loss_calls.get(name)
                as_module = float(call is not None and call.module is not None)
                return step, {"loss_id": _IDS.get(name, -1), "as_module": as_module, "first": first, "now": now}
        return None


# ---------------------------------------------------------------- rule


def _shape(m: dict[str, Any], prefix: str) -> tuple[int, ...] | None:
    dims: list[int] = []
    while isinstance(m.get(f"{prefix}_{len(dims)}"), (int, float)):
        dims.append(int(m[f"{prefix}_{len(dims)}"]))
    return tuple(dims) if dims or prefix == "input" else None


def _fmt(shape: tuple[int, ...] | None) -> str:
    return "[" + ", ".join(map(str, shape or ())) + "]"


def _call_name(name: str, m: dict[str, Any]) -> str:
    return f"nn.{MODULES.get(name, name)}" if m.get("as_module") else f"F.{name}"


def _view(shape: tuple[int, ...]) -> str:
    return ", ".join(["-1", *map(str, shape[1:])]) if len(shape) > 1 else "-1"


def _broadcast_fix(inp: tuple[int, ...], tgt: tuple[int, ...] | None) -> str:
    if tgt is not None and inp == (*tgt, 1):
        return f"use target.view({_view(inp)}) (target.unsqueeze(-1)), or pred.squeeze(-1) against the target"
    if tgt is not None and tgt == (*inp, 1):
        return "use target.squeeze(-1) (or give the model's head the target's trailing dim)"
    if tgt is not None and math.prod(inp) == math.prod(tgt):
        return f"reshape the target to the prediction's shape: target.view({_view(inp)})"
    return f"give the target the prediction's shape {_fmt(inp)} (one target per predicted value)"


def _explain(ev: Event) -> tuple[str, list[str]]:
    """The summary and the exact fix for one loss call's state."""
    m = ev.metrics
    lid = int(m.get("loss_id") if m.get("loss_id") is not None else -1)  # type: ignore[arg-type]
    name = LOSS_NAMES[lid] if 0 <= lid < len(LOSS_NAMES) else "the loss"
    call, inp, tgt = _call_name(name, m), _shape(m, "input") or (), _shape(m, "target")
    lo, hi, classes = m.get("min"), m.get("max"), int(m.get("classes") or 0)
    rng = f"[{lo:.3g}, {hi:.3g}]" if lo is not None and hi is not None else "[0, 1]"
    if ev.to == S.negated.value:
        first, now = m.get("first") or 0.0, m.get("now") or 0.0
        summary = (
            f"The loss minimised has the wrong sign: it is negative from its first step and falls ({first:.4g} → "
            f"{now:.4g}), yet it is made of {call}, which is never below 0: a minus sign turned it around, so "
            f"each step makes {call} larger (training maximises it)."
        )
        return summary, [
            f"minimise {call} itself: remove the minus in front of it (loss = criterion(output, target)); to "
            f"maximise a score, negate the score, never the loss",
        ]
    if ev.to == S.unbounded.value:
        deepest, level = m.get("deepest") or 0.0, m.get("level") or 0.0
        summary = (
            f"The loss minimised goes below 0 on {int(m.get('dips') or 0)} separate occasions (down to "
            f"{deepest:.4g} at step {int(m.get('deepest_step') or 0)}) though it usually sits at {level:.4g} "
            f"and {call}, the only kind of loss the script calls, is never below 0: a term written by hand is "
            "unbounded below on some batches, so the loss does not measure the fit there. A ratio such as a "
            "Dice or IoU score computed on raw logits does this: their sums can pass through 0."
        )
        return summary, [
            "compute the hand-written term on probabilities: apply torch.sigmoid (softmax over classes) to the "
            "logits before a Dice/IoU/Tversky ratio, and keep its denominator above 0 (add a smoothing constant)",
            "check every term added to the loss by hand for values it can take below 0 (a log of a value that "
            "reaches 0, a ratio of signed sums)",
        ]
    if ev.to == S.broadcast.value:
        summary = (
            f"{call} gets input {_fmt(inp)} and target {_fmt(tgt)}: they broadcast to {_fmt(_shape(m, 'broadcast'))}, "
            "so every prediction is fitted to every target of the batch and the loss stalls at the targets' "
            "variance (torch only warns)."
        )
        return summary, [_broadcast_fix(inp, tgt) + f" so that {call} compares like with like"]
    if ev.to == S.probabilities_to_ce.value:
        summary = (
            f"{call} gets probabilities (values in {rng}, each row of {classes} classes summing to 1: a softmax "
            "before it), but it applies log_softmax itself: the softmax twice squashes the gradient and the loss "
            "stalls."
        )
        return summary, [
            f"remove the softmax before {call} and pass the raw logits (apply softmax only to read predictions)",
            "or, keeping the probabilities, use F.nll_loss(torch.log(probs.clamp_min(1e-12)), target)",
        ]
    if ev.to == S.probabilities_to_logits_loss.value:
        summary = (
            f"{call} gets values in {rng} (a sigmoid before it), but it applies the sigmoid itself: its input "
            "is squashed twice, the gradient vanishes and the loss stalls."
        )
        return summary, [
            f"remove the sigmoid before {call} and pass the raw logits (apply sigmoid only to read predictions)",
            "or, keeping the sigmoid, use nn.BCELoss / F.binary_cross_entropy (less stable numerically)",
        ]
    dim = "dim=-1" if name in ("kl_div", "ctc_loss") else "dim=1"
    if ev.to == S.logits_to_nll.value and name == "ctc_loss":
        summary = (
            f"{call} gets raw scores (values up to {hi:.3g} > 0), but it expects log-probabilities (log_softmax "
            "over the classes, all <= 0): its gradient assumes each frame's probabilities sum to 1, so training "
            "follows a wrong gradient and the loss does not measure the alignment."
        )
        return summary, [f"apply F.log_softmax(output, {dim}) before {call} (and transpose to (time, batch, classes))"]
    if ev.to == S.logits_to_nll.value:
        summary = (
            f"{call} gets raw scores (values up to {hi:.3g} > 0), but it expects log-probabilities (all <= 0): "
            "the loss falls without bound by growing the scores, and does not measure the fit."
            if hi is not None
            else f"{call} gets raw scores, but it expects log-probabilities (all <= 0)."
        )
        tips = [f"apply F.log_softmax(logits, {dim}) (nn.LogSoftmax({dim})) before {call}"]
        if name == "nll_loss":
            tips.append("or pass the raw logits to F.cross_entropy / nn.CrossEntropyLoss instead (it does both)")
        return summary, tips
    if ev.to == S.probabilities_to_nll.value:
        summary = (
            f"{call} gets probabilities (values in {rng}, rows summing to 1: a softmax), but it expects "
            "log-probabilities: its gradient is bounded and skewed, and the loss stalls."
        )
        tips = [f"use F.log_softmax(logits, {dim}) instead of softmax before {call}"]
        if name == "nll_loss":
            tips.append("or pass the raw logits to F.cross_entropy / nn.CrossEntropyLoss instead")
        return summary, tips
    terms = int(m.get("terms") or 0)
    summary = (
        f"{call} sums {terms} terms (reduction='sum'): every gradient is {terms}x the mean's, which the "
        "learning rate was tuned for, and the loss is unstable."
    )
    return summary, [
        f"use reduction='mean' in {call}, or divide the learning rate by {terms}",
    ]


def _divided_later(ctx: Context, m: dict[str, Any]) -> bool:
    """A class loss summed over `terms` terms whose loss series starts near one term's scale, ln(classes), not
    near terms x ln(classes): the script divides the sum afterwards (Hugging Face models sum the token losses
    and divide by the number of tokens in the batch), so its gradient is the mean's. Judged against the
    geometric middle of the two, sqrt(terms) x ln(classes)."""
    classes, terms = int(m.get("classes") or 0), int(m.get("terms") or 0)
    if classes < 2 or terms < 2:
        return False
    starts = [e.metrics.get("start") for e in ctx.select(types=[EventType.optimizer_instability.value])]
    starts += [e.metrics.get("first_loss") for e in ctx.select(types=[EventType.run_summary.value])]
    start = next((float(v) for v in starts if isinstance(v, (int, float)) and math.isfinite(v)), None)
    return start is not None and abs(start) < math.sqrt(terms) * math.log(classes)


def loss_misuse(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.loss_call_health.value], to=MISUSE, sites=[SITE])
    unstable = ctx.select(types=[EventType.optimizer_instability.value], to=UNSTABLE) or ctx.select(
        types=[EventType.gradient_health_transition.value], to=["exploding"]
    )
    opts = [str(o.get("type") or "") for o in ctx.optimizers]
    if not unstable or (opts and all(map(adaptive, opts))):
        # a summed loss is fine at a suitably small learning rate, and under optimizers that normalise each
        # step (Adam's family, RMSprop, Lion) its scale cancels out: the sum changes nothing there
        evs = [e for e in evs if e.to != S.sum_reduction.value]
    evs = [e for e in evs if not (e.to == S.sum_reduction.value and _divided_later(ctx, e.metrics))]
    if not evs:
        return None
    last: dict[float | None, str] = {}  # loss -> its last state
    for e in ctx.select(types=[EventType.loss_call_health.value], sites=[SITE]):
        last[e.metrics.get("loss_id")] = e.to
    onset = min(e.step for e in evs)
    first = min(evs, key=lambda e: (e.step, -CONFIDENCE[e.to]))
    held = sum(last.get(e.metrics.get("loss_id")) == e.to for e in evs) / len(evs)
    conf = CONFIDENCE[first.to] * (0.8 + 0.2 * held)  # a misuse that went away was still there
    summary, tips = _explain(first)
    if not opts and all(e.to == S.sum_reduction.value for e in evs):
        # a manual update's step size is the script's own: the sum makes the gradients N times larger, and
        # nothing says the step it takes with them is too large (jcjohnson's loop sums at lr 1e-4 and trains)
        conf = min(conf, UNSEEN_STEP)
        summary += " No torch.optim optimizer was seen, so the step size this scales is unknown: a note, not a cause."
    others = {e.to for e in evs} - {first.to}
    for other in sorted(others):
        extra = min((e for e in evs if e.to == other), key=lambda e: e.step)
        tips += _explain(extra)[1][:1]
    h = _hyp(Kind.loss_misuse, conf, None, onset, summary, evs, tips, [SITE])
    h.origin = Origin(module=None, step=onset, root=None)
    return h


FAMILY = Family("lossfn", LossCallObserver, (loss_misuse,))

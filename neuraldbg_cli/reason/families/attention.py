"""Attention collapse: attention logits growing without bound, rows collapsing to one key (read by attnprobe.py on
sampled steps: per layer the largest |q.k| * scale and the normalised entropy of a few recomputed rows).

States (AttnState), one debounced machine per attention layer:
- collapsed: the median over rows (and heads) of entropy / log(keys) is below `attn_entropy_collapsed` where it
  started at `attn_entropy_start` or more: most rows put all their weight on one key, the softmax's gradient
  vanishes there and the layer stops learning (the instability QK-norm and logit soft-capping address). A layer
  sharp from its first sample was built so and did not collapse;
- logit_growth: the largest logit is above `attn_logit_max` and `attn_logit_rise` times what it was
  `attn_window` samples before: growing without bound (it precedes loss spikes and the collapse).
Healthy attention starts near entropy 1 (uniform rows) and trained heads sit at 0.2-0.9, logits below ~20."""

from __future__ import annotations

import math
from collections import deque

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.advice import lower_lr
from neuraldbg_cli.reason.families.base import Board, Family, Observer, settled
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import _first_by_module, _hyp, _still
from neuraldbg_cli.trace.events import AttnState, AttnStats, EventType, Hypothesis, Kind, StepRecord

S = AttnState
ETYPE = EventType.attention_health.value
SITE = "attention"
FAULTS = (S.collapsed.value, S.logit_growth.value)
NORMAL = S.normal.value  # a plain string: compared per layer per sampled step


def classify_attn(s: AttnStats, start_entropy: float | None, past_logit: float | None, th: Thresholds) -> str:
    """Pure. start_entropy: the layer's median entropy at its first sample; past_logit: its largest logit
    `attn_window` samples before (None: fewer samples so far)."""
    if not (math.isfinite(s.max_logit) and math.isfinite(s.entropy_median)):
        return NORMAL  # non-finite scores are the non_finite family's
    if (
        s.entropy_median < th.attn_entropy_collapsed
        and start_entropy is not None
        and start_entropy >= th.attn_entropy_start
    ):
        return S.collapsed.value
    if s.max_logit > th.attn_logit_max and past_logit is not None and s.max_logit > th.attn_logit_rise * past_logit:
        return S.logit_growth.value
    return NORMAL


class AttentionObserver(Observer):
    """Per sampled step: each attention layer the probe recomputed."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.start: dict[tuple[str, str], float] = {}  # (root, module) -> median entropy at its first sample
        self.logits: dict[tuple[str, str], deque[float]] = {}  # (root, module) -> its latest largest logits

    def observe(self, rec: StepRecord) -> None:
        for (root, name), s in rec.attn.items():
            if rec.active is not None and root not in rec.active:
                continue
            key = (root, name)
            if math.isfinite(s.entropy_median):
                self.start.setdefault(key, s.entropy_median)
            hist = self.logits.setdefault(key, deque(maxlen=self.th.attn_window))
            past = hist[0] if len(hist) == self.th.attn_window else None
            if math.isfinite(s.max_logit):
                hist.append(s.max_logit)
            start = self.start.get(key)
            state = classify_attn(s, start, past, self.th)
            if settled(self.board.machines, ("attn", root, name), state):
                continue  # nothing changes (most steps): no evidence to build
            metrics = {
                "max_logit": s.max_logit,
                "past_max_logit": past,
                "entropy": s.entropy,
                "entropy_median": s.entropy_median,
                "start_entropy": start,
                "keys": float(s.keys),
                "heads": float(s.heads),
            }
            self.board.feed(("attn", root, name), NORMAL, state, rec.step, metrics, ETYPE, SITE, root, name)


# ---------------------------------------------------------------- rule


def _listed(names: list[str]) -> str:
    return f"{', '.join(names[:3])}{'…' if len(names) > 3 else ''}"


def attention_collapse(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[ETYPE], to=FAULTS)
    if not evs:
        return None
    first = _first_by_module(evs)
    ordered = sorted(first.values(), key=lambda e: (e.step, ctx.order(e)))
    origin = ordered[0]
    names = [e.module or "" for e in sorted(first.values(), key=ctx.order)]
    collapsed = [e for e in evs if e.to == S.collapsed.value]
    persistent = max(_still(ctx, collapsed, S.collapsed.value), _still(ctx, evs, origin.to))
    # the numbers: the worst reading among the layers' events
    big = max((e.metrics.get("max_logit") or 0.0 for e in evs), default=0.0)
    entropies = [v for e in evs if (v := e.metrics.get("entropy_median")) is not None]
    low = min(entropies) if entropies else None
    start = origin.metrics.get("start_entropy")
    parts = [f"largest attention logit {big:.3g}"]
    if low is not None:
        parts.append(
            f"median row entropy {low:.2g} of its maximum" + (f" (started at {start:.2g})" if start is not None else "")
        )
    what = "rows collapse to one key" if collapsed else "logits grow without bound"
    summary = (
        f"Attention collapse in {_listed(names)} from step {origin.step}: {what}; {', '.join(parts)}; "
        f"{len(first)} layer(s). Saturated softmax rows pass almost no gradient, and growing logits precede "
        f"loss spikes."
    )
    tips = [
        "normalise queries and keys before their dot product (QK-norm: a LayerNorm/RMSNorm on q and k per head)",
        "cap the attention logits (soft-capping: cap * tanh(logits / cap), e.g. cap 30-50)",
        *lower_lr(ctx),
        "warm the learning rate up over the first few hundred to thousand steps",
    ]
    base = 0.75 if collapsed else 0.6
    conf = min(0.92, base + 0.06 * min(len(first), 3)) * (0.6 + 0.4 * persistent)
    return _hyp(Kind.attention_collapse, conf, origin, origin.step, summary, evs, tips, names)


FAMILY = Family("attention", AttentionObserver, (attention_collapse,))

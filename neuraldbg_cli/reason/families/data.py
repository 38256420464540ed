"""Data: the model's input and targets are normal, not normalised (extreme scale), shifted from their early
distribution, or non-finite."""

from __future__ import annotations

import math
import statistics

from neuraldbg_cli.config import Thresholds
from neuraldbg_cli.reason.families.base import NON_FINITE, Board, Family, Observer, settled
from neuraldbg_cli.reason.families.context import Context
from neuraldbg_cli.reason.families.evidence import _hyp, _still
from neuraldbg_cli.trace.events import ActStats, DataState, EventType, Hypothesis, Kind, Origin, StepRecord

ETYPE = EventType.data_anomaly.value
NORMAL, EXTREME_SCALE, SHIFTED = DataState.normal.value, DataState.extreme_scale.value, DataState.shifted.value


def classify_data(s: ActStats, baseline: tuple[float, float] | None, scale_limit: float, th: Thresholds) -> str:
    if s.nonfinite > 0 or not math.isfinite(s.mean):
        return NON_FINITE
    if max(abs(s.mean), s.std) > scale_limit:
        return EXTREME_SCALE
    # a shift is judged between distributions: a single value (an actor-critic's per-step return fed to
    # smooth_l1_loss as a 0-d target) has none, its std is 0 by construction (count 0: not measured)
    if baseline is not None and s.count != 1:
        b_mean, b_std = baseline
        ref = max(b_std, th.data_std_floor)
        if abs(s.mean - b_mean) > th.data_shift * ref or s.std > th.data_shift * ref or s.std * th.data_shift < b_std:
            return SHIFTED
    return NORMAL


class DataObserver(Observer):
    """Per step: the statistics of each model's input and targets, against their early baseline."""

    def __init__(self, board: Board) -> None:
        super().__init__(board)
        self.data_base: dict[tuple, list[tuple[float, float]]] = {}

    def observe(self, rec: StepRecord) -> None:
        for (root, _module, site), s in rec.acts.items():
            if site not in ("input", "target"):
                continue
            key = ("data", root, site)
            if not isinstance(s, ActStats):
                if not math.isfinite(s):
                    self.board.feed(key, NORMAL, NON_FINITE, rec.step, {"sum": s}, ETYPE, site, root, None)
                continue
            base = self.data_base.setdefault(key, [])
            baseline = _median_pair(base) if len(base) >= self.th.baseline_samples else None
            limit = self.th.data_scale if site == "input" else self.th.target_scale
            state = classify_data(s, baseline, limit, self.th)
            if state == NORMAL and len(base) < self.th.baseline_samples and s.count != 1:
                base.append((s.mean, s.std))
            if settled(self.board.machines, key, state):
                continue  # nothing changes (most steps): no evidence to build
            metrics = {"mean": s.mean, "std": s.std, "min": s.min, "max": s.max, "nonfinite": s.nonfinite}
            if baseline:
                metrics.update(baseline_mean=baseline[0], baseline_std=baseline[1])
            self.board.feed(key, NORMAL, state, rec.step, metrics, ETYPE, site, root, None)


def _median_pair(pairs: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)


# ---------------------------------------------------------------- rule


def data_anomaly(ctx: Context) -> Hypothesis | None:
    evs = ctx.select(types=[EventType.data_anomaly.value], to=["non_finite", "extreme_scale", "shifted"])
    made = [e.step for e in ctx.select(types=[EventType.non_finite.value], sites=["output", "activation"])]
    if made:  # a NaN target computed by the model's own (NaN) modules is not bad data
        evs = [e for e in evs if not (e.site == "target" and e.to == "non_finite" and e.step >= min(made))]
    if not evs:
        return None
    onset = min(e.step for e in evs)
    first = min(
        (e for e in evs if e.step == onset), key=lambda e: ("non_finite", "extreme_scale", "shifted").index(e.to)
    )
    m = {k: v for k, v in first.metrics.items() if v is not None}  # null (NaN) metrics: the defaults below
    what = "targets" if first.site == "target" else "inputs"
    conf = (
        0.92
        if first.to == "non_finite"
        else {"extreme_scale": 0.75, "shifted": 0.7}[first.to] * (0.7 + 0.3 * _still(ctx, evs, first.to))
    )  # one NaN batch is enough to ruin the weights
    if first.to == "non_finite":
        summary = f"The {what} contain NaN/Inf values from step {onset}."
        tips = [
            "drop or fix non-finite rows before training: x = x[torch.isfinite(x).all(dim=1)]",
            "check the data pipeline (missing values, division by zero in preprocessing)",
        ]
    elif first.to == "extreme_scale":
        summary = (
            f"The {what} are not normalised: mean {m.get('mean', 0):.3g}, std {m.get('std', 0):.3g} "
            f"(range {m.get('min', 0):.3g}…{m.get('max', 0):.3g}) from step {onset}."
        )
        tips = [
            f"normalise {what}: subtract mean {m.get('mean', 0):.4g} and divide by std {m.get('std', 1):.4g} "
            f"(e.g. transforms.Normalize, or x / 255 for pixels)"
        ]
    else:
        summary = (
            f"The {what} distribution shifts at step {onset}: mean {m.get('mean', 0):.3g}, std "
            f"{m.get('std', 0):.3g} vs mean {m.get('baseline_mean', 0):.3g}, std {m.get('baseline_std', 0):.3g} before."
        )
        tips = ["check the data source / preprocessing for that step (a different file, unit or augmentation)"]
    origin = Origin(module=None, step=onset, root=first.root)
    h = _hyp(Kind.data_anomaly, conf, None, onset, summary, evs, tips, [first.site or "input"])
    h.origin = origin
    return h


FAMILY = Family("data", DataObserver, (data_anomaly,))

"""stats.jsonl rows -> the loss series of the report. A missing (null) loss is told apart with the events:
NaN/Inf where the monitor saw the loss turn non-finite, otherwise "no loss recorded"."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from neuraldbg_cli.render.report.grid import States

LOG_SPAN = 100.0  # a positive loss spanning more than this factor is drawn on a log scale
LIMIT = 1e300  # a finite loss beyond it is drawn at it: a y range at the float64 limits overflows matplotlib


@dataclass
class LossData:
    series: list[tuple[str, np.ndarray, np.ndarray]] = field(default_factory=list)  # name, steps, values (NaN: none)
    nonfinite: list[int] = field(default_factory=list)  # steps whose loss was NaN/Inf
    missing: list[int] = field(default_factory=list)  # steps with a row but no loss
    log: bool = False


def loss_data(stats: list[dict[str, Any]], states: States) -> LossData:
    """One series per trained model when several report their own loss ("losses"), else "loss"."""
    names = list(dict.fromkeys(k for r in stats if isinstance(r.get("losses"), dict) for k in r["losses"]))
    out = LossData()
    columns: dict[str, tuple[list[int], list[float]]] = {n: ([], []) for n in names or ["loss"]}
    for r in stats:
        values: dict[str, Any] = (
            r["losses"] if names and isinstance(r.get("losses"), dict) else {(names or ["loss"])[0]: r.get("loss")}
        )
        for name, v in values.items():
            if name not in columns:
                continue
            ok = isinstance(v, (int, float)) and not isinstance(v, bool)
            columns[name][0].append(r["step"])
            columns[name][1].append(min(max(float(v), -LIMIT), LIMIT) if ok else math.nan)
            if not ok or not math.isfinite(v):
                if ok or states.any_at("loss", r["step"], "non_finite"):
                    out.nonfinite.append(r["step"])
                else:
                    out.missing.append(r["step"])
    out.series = [(n, np.asarray(s, dtype=float), np.asarray(v, dtype=float)) for n, (s, v) in columns.items() if s]
    finite = np.concatenate([v[np.isfinite(v)] for _, _, v in out.series]) if out.series else np.empty(0)
    out.log = bool(finite.size) and finite.min() > 0 and finite.max() / finite.min() > LOG_SPAN
    out.nonfinite, out.missing = sorted(set(out.nonfinite)), sorted(set(out.missing))
    return out

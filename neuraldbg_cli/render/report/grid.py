"""stats.jsonl rows -> per-layer grids (layer x step bin) of one quantity, as uint8 codes.

A code is 0..LEVELS-1 for a value on the grid's colour scale, or one of the special codes below: zeros,
NaN/Inf, absent values and steps without a sample each get their own colour instead of being dropped.
Codes, not floats, because the picture and the page's hover read the same cells and 200 layers x 800
bins embed in about 200 KB. Pure numpy: no torch, no matplotlib."""

from __future__ import annotations

import bisect
import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

LEVELS = 250
ZERO, NONFINITE, ABSENT, NODATA = 250, 251, 252, 253
# Which code wins when a bin holds several steps: a NaN anywhere in the bin must show, then an absent
# value, then an exact zero, then the worst finite value (VALUE stands for any code below LEVELS).
VALUE = 254
SPECIAL_NAMES = {
    ZERO: "exactly 0",
    NONFINITE: "NaN / Inf",
    ABSENT: "absent (no gradient / not stepped)",
    NODATA: "not sampled / not measured",
}
PRIORITY = {NODATA: 0, VALUE: 1, ZERO: 2, ABSENT: 3, NONFINITE: 4}
_PRIORITY_OF_CODE = np.zeros(256, dtype=np.uint8)  # code -> its PRIORITY; any other number reads as no data
_PRIORITY_OF_CODE[list(PRIORITY)] = list(PRIORITY.values())
MAX_COLUMNS = 800  # about one bin per pixel of the plot's width on the page (plots.AXES_WIDTH_IN at 100 dpi)
LOG_FLOOR = 1e-300  # a log-scale value below it (a denormal) is drawn at it
RELU_ZERO_FRAC = 0.05  # as the monitor's classifier: an output >= 0 with this many exact zeros is ReLU-like


@dataclass
class Axis:
    """The step axis shared by every plot: column j covers steps [start + j*width, start + (j+1)*width)."""

    start: int
    stop: int  # one past the last step
    columns: int

    @property
    def width(self) -> float:
        return (self.stop - self.start) / self.columns

    def column(self, step: int) -> int:
        return min(self.columns - 1, int((step - self.start) / self.width))


@dataclass
class Grid:
    name: str  # grad | act | update: also the plot's anchor
    title: str
    scale_label: str
    rows: list[str]  # "root|module" keys in forward order
    labels: list[str]
    codes: np.ndarray  # uint8, (len(rows), axis.columns)
    axis: Axis
    lo: float  # the colour scale: code 0 starts at lo, code LEVELS-1 ends at hi
    hi: float
    log: bool
    specials: tuple[int, ...]  # the special codes this grid can hold, for its legend


def step_axis(stats: list[dict[str, Any]]) -> Axis | None:
    steps = [r["step"] for r in stats]
    if not steps:
        return None
    start, stop = min(steps), max(steps) + 1
    return Axis(start, stop, min(MAX_COLUMNS, stop - start))


def layer_order(models: dict[str, Any], keys: Iterable[str]) -> list[str]:
    """Forward-call order from model.json, then any other key in the order first seen."""
    seen = list(dict.fromkeys(keys))
    present = set(seen)
    order = [
        f"{m.get('name')}|{mod}"
        for m in models.get("models", [])
        if isinstance(m, dict)
        for mod in m.get("order", [])
        if isinstance(mod, str)
    ]
    first = [k for k in dict.fromkeys(order) if k in present]
    placed = set(first)
    return first + [k for k in seen if k not in placed]


def labels_for(keys: list[str]) -> list[str]:
    """Module names alone when one model is observed; "Root.module" when several are."""
    parts = [k.partition("|")[::2] for k in keys]
    if len({root for root, _ in parts}) <= 1:
        return [module or root for root, module in parts]
    return [".".join(p for p in (root, module) if p) for root, module in parts]


SITE_OF_TYPE = {
    "gradient_health_transition": "gradient",
    "activation_regime_shift": "output",
    "optimizer_instability": "loss",
    "parameter_update": "weights",
}  # events written without a site


class States:
    """Health state timelines from the events, per (site, "root|module"): told apart what stats.jsonl cannot,
    since JSON writes NaN as null, the same null as "no gradient"."""

    def __init__(self, events: Iterable[Any]) -> None:
        self._t: dict[tuple[str, str], tuple[list[int], list[str]]] = {}
        for ev in sorted(events, key=lambda e: e.step):
            site = getattr(ev, "site", None) or SITE_OF_TYPE.get(ev.type, "")
            key = (site, f"{ev.root or ''}|{ev.module or ''}")
            steps, states = self._t.setdefault(key, ([], []))
            steps.append(ev.step)
            states.append(ev.to)
        self._keys: dict[str, list[str]] = {}
        for site, module_key in self._t:
            self._keys.setdefault(site, []).append(module_key)

    def at(self, site: str, key: str, step: int) -> str | None:
        steps, states = self._t.get((site, key), ((), ()))
        i = bisect.bisect_right(steps, step)
        return states[i - 1] if i else None

    def any_at(self, site: str, step: int, state: str) -> bool:
        return any(self.at(site, key, step) == state for key in self._keys.get(site, ()))


_NUMBER = {int, float}  # JSON numbers as orjson reads them (a bool is neither)


def _num(v: Any) -> float | None:
    return v if type(v) in _NUMBER else None


# ---------------------------------------------------------------- one cell per quantity
# Each reader turns one stats row into {key: float value, or a special code}.

Cells = dict[str, Any]


def grad_cells(row: dict[str, Any], numel: dict[str, float], states: States) -> Cells:
    """numel: sqrt of each module's parameter count, where model.json gives it."""
    out: Cells = {}
    for key, val in row.get("grads", {}).items():
        if type(val) is not list or not val:
            continue
        norm, weight = _num(val[0]), _num(val[1]) if len(val) > 1 else None
        if norm is None:  # null: no .grad, or NaN/Inf written as null; the monitor's events tell which
            nonfinite = states.at("gradient", key, row["step"]) == "non_finite" or weight is None
            out[key] = NONFINITE if nonfinite else ABSENT
        elif not math.isfinite(norm):
            out[key] = NONFINITE
        else:
            out[key] = ZERO if norm == 0 else norm / numel.get(key, 1.0)
    return out


def act_cells(row: dict[str, Any], numel: dict[str, float], states: States) -> Cells:
    """The worse of each module's sites (output, activation), for sites where the fractions are measured."""
    out: Cells = {}
    for key, val in row.get("acts", {}).items():
        root, _, rest = key.partition("|")
        module = rest.rpartition("|")[0]
        if not module or type(val) is not list or len(val) < 9:
            continue
        layer = f"{root}|{module}"
        try:
            frac = _bad_fraction(*val[:9])
        except TypeError:  # a field of another JSON type: a hand-edited file
            continue
        prev = out.get(layer)
        if frac is not None and prev != NONFINITE and (prev is None or frac == NONFINITE or frac > prev):
            out[layer] = frac
    return out


def _bad_fraction(
    mean: Any, _std: Any, lo: Any, hi: Any, zero: Any, dead: Any, s01: Any, s11: Any, nonfinite: Any
) -> Any:
    """As the monitor classifies an activation: dead units if ReLU-like, else units at the rails of a
    sigmoid/tanh range. NONFINITE for NaN/Inf; None where the fractions are not measured (a plain output)."""
    if mean is None or (nonfinite or 0) > 0 or not math.isfinite(mean):
        return NONFINITE
    if lo is None or hi is None or None in (zero, dead, s01, s11):
        return None
    if lo >= 0 and zero >= RELU_ZERO_FRAC:
        return float(dead)
    return float(s01 if lo >= 0 and hi <= 1 else s11 if lo >= -1 and hi <= 1 else 0.0)


def update_cells(row: dict[str, Any], numel: dict[str, float], states: States) -> Cells:
    """Size of one optimizer step relative to the weights: ~1e-3 is healthy, ~1 means lr far too large."""
    updates = row.get("updates")
    if not isinstance(updates, dict):
        return {}
    out: Cells = {}
    for key, val in row.get("grads", {}).items():
        weight = _num(val[1]) if type(val) is list and len(val) > 1 else None
        if key not in updates:
            out[key] = ABSENT  # measured for other modules, not this one: not stepped by any optimizer
            continue
        upd = _num(updates[key])
        if upd is None or weight is None or not math.isfinite(upd) or not math.isfinite(weight):
            out[key] = NONFINITE
        elif upd == 0:
            out[key] = ZERO
        elif weight > 0:
            out[key] = upd / weight
    return out


QUANTITIES: dict[str, tuple[Callable[..., Cells], str, str, bool]] = {
    # name: (reader, title, colour scale label, log scale)
    "grad": (grad_cells, "Gradient RMS per layer", "gradient RMS (log scale)", True),
    "act": (act_cells, "Dead or saturated activations per layer", "fraction of units dead or saturated", False),
    "update": (update_cells, "Update-to-weight ratio per layer", "|Δw| / |w| per step (log scale)", True),
}


def build(name: str, stats: list[dict[str, Any]], axis: Axis, models: dict[str, Any], states: States) -> Grid | None:
    reader, title, scale_label, log = QUANTITIES[name]
    numel = {
        f"{m.get('name')}|{mod}": math.sqrt(info["params"])
        for m in models.get("models", [])
        if isinstance(m, dict)
        for mod, info in m.get("modules", {}).items()
        if type(info.get("params")) is int and info["params"] > 0
    }  # gradient RMS = L2 norm / sqrt(numel)
    sampled = [
        (r["step"], cells)
        for r in stats
        if isinstance(r.get("grads"), dict) or isinstance(r.get("acts"), dict)
        if (cells := reader(_safe(r), numel, states))
    ]
    if not sampled:
        return None
    sampled.sort(key=lambda sc: sc[0])
    keys = layer_order(models, (k for _, cells in sampled for k in cells))
    index = {k: i for i, k in enumerate(keys)}
    values = np.full((len(keys), len(sampled)), np.nan)
    for j, (_, cells) in enumerate(sampled):  # a special code goes in as its negative: values are >= 0
        values[[index[k] for k in cells], j] = [-float(v) if type(v) is int else v for v in cells.values()]
    special = values < 0
    kind = np.where(
        special,
        _PRIORITY_OF_CODE[np.clip(-np.nan_to_num(values), 0, 255).astype(np.intp)],
        np.where(np.isnan(values), PRIORITY[NODATA], PRIORITY[VALUE]),
    ).astype(np.uint8)
    values[special] = np.nan
    if log:  # the scale's ends stay normal floats: their logs, and the colour bar, stay computable
        values = np.clip(values, LOG_FLOOR, 1 / LOG_FLOOR)
    lo, hi = _range(values, log)
    codes = _bin(values, kind, [axis.column(s) for s, _ in sampled], axis.columns, lo, hi, log)
    if name == "grad" and any(not numel.get(k) for k in keys):
        title = "Gradient norm per layer (RMS where the layer's size is known)"
        scale_label = "gradient norm (log scale)"
    specials = (ZERO, NONFINITE, ABSENT, NODATA) if log else (NONFINITE, NODATA)
    return Grid(name, title, scale_label, keys, labels_for(keys), codes, axis, lo, hi, log, specials)


def _safe(row: dict[str, Any]) -> dict[str, Any]:
    """The parts of a row a reader indexes, each of the JSON type it expects (stats.jsonl may be hand-edited)."""
    return {"step": row["step"], **{k: row[k] for k in ("grads", "acts", "updates") if isinstance(row.get(k), dict)}}


def _range(values: np.ndarray, log: bool) -> tuple[float, float]:
    finite = values[np.isfinite(values) & ((values > 0) if log else True)]
    if not log:
        return 0.0, max(1.0, float(finite.max())) if finite.size else 1.0
    if not finite.size:
        return 1e-3, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    if hi / lo < 10:  # at least one decade, centred, so a flat quantity still reads on the scale
        mid = 10 ** ((math.log10(lo) + math.log10(hi)) / 2)
        lo, hi = mid / math.sqrt(10), mid * math.sqrt(10)
    return lo, hi


def _bin(
    values: np.ndarray, kind: np.ndarray, cols: list[int], ncols: int, lo: float, hi: float, log: bool
) -> np.ndarray:
    """Samples -> columns. A column with several samples keeps its most urgent special code, else its worst
    value: the largest fraction, or on a log scale the one farthest (in decades) from the layer's median.
    A column without a sample holds the previous one (each sample stands until the next), NODATA before."""
    col = np.asarray(cols)
    starts = np.flatnonzero(np.r_[True, np.diff(col) != 0])
    pri = np.maximum.reduceat(kind, starts, axis=1)
    with np.errstate(all="ignore"):
        scaled = np.log10(values) if log else values
        top = np.fmax.reduceat(scaled, starts, axis=1)
        if log:
            bottom = np.fmin.reduceat(scaled, starts, axis=1)
            with warnings.catch_warnings():  # a layer without any finite value has no median: NaN is right
                warnings.simplefilter("ignore", RuntimeWarning)
                median = np.nanmedian(np.where(np.isfinite(scaled), scaled, np.nan), axis=1, keepdims=True)
            top = np.where(np.abs(bottom - median) > np.abs(top - median), bottom, top)
        f_lo, f_hi = (math.log10(lo), math.log10(hi)) if log else (lo, hi)
        level = np.clip(np.floor((top - f_lo) / (f_hi - f_lo) * LEVELS), 0, LEVELS - 1)
    by_priority = np.array([NODATA, 0, ZERO, ABSENT, NONFINITE], dtype=np.uint8)
    binned = by_priority[pri]
    is_value = pri == PRIORITY[VALUE]
    binned[is_value] = np.nan_to_num(level[is_value]).astype(np.uint8)
    # column -> the last group at or before it
    group = np.searchsorted(col[starts], np.arange(ncols), side="right") - 1
    out = np.full((values.shape[0], ncols), NODATA, dtype=np.uint8)
    out[:, group >= 0] = binned[:, group[group >= 0]]
    return out

"""Per-layer rows of the architecture statistics in stats.jsonl (norms, resid, attn, loss_calls): one table per
kind of site, a row per layer in forward order with its first and last sampled values and the extreme between,
so that a drifting BatchNorm, a collapsing gain, a branch that adds nothing or attention collapsing onto one key
reads at a glance. Pure: the stats rows and model.json only."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Any

from neuraldbg_cli.render.report.grid import labels_for, layer_order

Series = list[list[Any]]  # one site's stats values per sampled row, in step order


def tables(stats: list[dict[str, Any]], models: dict[str, Any]) -> str:
    """The tables that have rows, as HTML ("" when the run read none of these sites)."""
    types = _module_types(models)
    facts = _block_facts(models)
    parts = [
        _table(
            "Normalisation layers",
            ["layer", "type", "mode", "values per channel (batch)", "mean shift (σ)", "|ln var ratio|", "gain RMS"],
            _sites(stats, "norms", models),
            lambda key, s: [
                types.get(key, ""),
                _mode(s),
                _count(s),
                _span(_col(s, 1), max),
                _span(_col(s, 2), max),
                _span(_col(s, 3), min),
            ],
        ),
        _table(
            "Residual blocks",
            ["block", "norm placement", "branch / skip RMS", "skip RMS"],
            _sites(stats, "resid", models),
            lambda key, s: [facts.get(key, ""), _span([_ratio(v) for v in s], min), _span(_col(s, 0), max)],
        ),
        _table(
            "Attention layers",
            ["layer", "largest logit", "row entropy (median, of its maximum)"],
            _sites(stats, "attn", models),
            lambda key, s: [_span(_col(s, 0), max), _span(_col(s, 2), min)],
        ),
        _table(
            "Loss calls",
            ["loss", "input shape", "target shape", "input range", "row sums − 1"],
            _sites(stats, "loss_calls", None),
            lambda key, s: [_shape(s, 3), _shape(s, 4), _range(s[-1]), _num(_at(s[-1], 2))],
        ),
    ]
    return "".join(p for p in parts if p)


def _table(title: str, head: list[str], sites: dict[str, Series], cells: Callable[[str, Series], list[str]]) -> str:
    if not sites:
        return ""
    keys = list(sites)
    rows = "".join(
        f"<tr><td>{escape(label)}</td>{''.join(f'<td>{escape(c)}</td>' for c in cells(key, sites[key]))}</tr>"
        for key, label in zip(keys, labels_for(keys) if "|" in keys[0] else keys)
    )
    heads = "".join(f"<th>{escape(h)}</th>" for h in head)
    return f"<h3>{escape(title)}</h3><table class='arch'><tr>{heads}</tr>{rows}</table>"


def _sites(stats: list[dict[str, Any]], field: str, models: dict[str, Any] | None) -> dict[str, Series]:
    """key ("root|module", or a loss's name) -> its values per sampled row; layers in forward order."""
    found: dict[str, Series] = {}
    for row in stats:
        block = row.get(field)
        if isinstance(block, dict):
            for key, values in block.items():
                if isinstance(key, str) and isinstance(values, list) and values:
                    found.setdefault(key, []).append(values)
    if models is None:
        return found
    return {k: found[k] for k in layer_order(models, found)}


def _module_types(models: dict[str, Any]) -> dict[str, str]:
    return {
        f"{m.get('name')}|{name}": str(info.get("type", ""))
        for m in models.get("models", [])
        if isinstance(m, dict) and isinstance(m.get("modules"), dict)
        for name, info in m["modules"].items()
        if isinstance(info, dict)
    }


def _block_facts(models: dict[str, Any]) -> dict[str, str]:
    """ "root|block" -> its norm placement (model.json facts: pre, post, none)."""
    out = {}
    for m in models.get("models", []):
        facts = m.get("facts") if isinstance(m, dict) else None
        blocks = facts.get("residual_blocks") if isinstance(facts, dict) else None
        for name, b in (blocks or {}).items() if isinstance(blocks, dict) else ():
            if isinstance(b, dict):
                out[f"{m.get('name')}|{name}"] = str(b.get("norm", ""))
    return out


def _at(values: list[Any], i: int) -> Any:
    return values[i] if i < len(values) else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(v: Any) -> str:
    return f"{v:.3g}" if _number(v) else "–"


def _col(series: Series, i: int) -> list[Any]:
    return [_at(v, i) for v in series]


def _span(values: list[Any], extreme: Callable[..., float]) -> str:
    """First → last of the numbers among `values`, and their extreme (min or max) between when it is neither."""
    values = [v for v in values if _number(v)]
    if not values:
        return "–"
    first, last, most = _num(values[0]), _num(values[-1]), _num(extreme(values))
    text = first if len(values) == 1 else f"{first} → {last}"
    word = "max" if extreme is max else "min"
    return text + (f" ({word} {most})" if most not in (first, last) else "")


def _ratio(values: list[Any]) -> float | None:
    skip, branch = _at(values, 0), _at(values, 1)
    return branch / skip if _number(skip) and _number(branch) and skip > 0 else None


def _mode(series: Series) -> str:
    modes = {v[0] for v in series if _number(v[0])}
    return "train" if modes == {1.0} else "eval" if modes == {0.0} else "train and eval" if modes else "–"


def _count(series: Series) -> str:
    last = series[-1]
    per_channel, batch = _at(last, 5), _at(last, 6)
    if not per_channel:
        return "–"
    return f"{per_channel:g}" + (f" ({batch:g})" if batch else "")


def _shape(series: Series, i: int) -> str:
    shape = _at(series[-1], i)
    return f"[{', '.join(map(str, shape))}]" if isinstance(shape, list) else "–"


def _range(values: list[Any]) -> str:
    lo, hi = _at(values, 0), _at(values, 1)
    return f"{_num(lo)} to {_num(hi)}" if _number(lo) or _number(hi) else "–"

"""Helpers shared by rules: how a rule builds its Hypothesis from the events it selected (the first onset per
module, the origin, the evidence listed, the confidence of a spread, what the model is made of). Shared so that
every rule's Hypothesis reads alike; what the rules read is context.py's Context. Pure, no torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from neuraldbg_cli.reason.families.context import Context, Event
from neuraldbg_cli.trace.events import Hypothesis, Kind, Origin


def _first_by_module(events: list[Event]) -> dict[tuple, Event]:
    first: dict[tuple, Event] = {}
    for e in events:
        k = (e.root, e.module)
        if k not in first or e.step < first[k].step:
            first[k] = e
    return first


def _still(ctx: Context, events: list[Event], state: str) -> float:
    """Fraction of the affected sites whose last transition is still into `state` (did not recover)."""
    keys = {(e.type, e.root, e.module, e.site) for e in events}
    if not keys:
        return 0.0
    return sum(1 for k in keys if ctx.last_to(k) == state) / len(keys)


def _origin_of(ctx: Context, events: list[Event], output_side: bool = False) -> Event:
    """Earliest onset; among modules starting in the same observation the input side (or output side)."""
    onset = min(e.step for e in events)
    same = [e for e in events if e.step <= onset]
    return (max if output_side else min)(same, key=ctx.order)


def _evidence(events: list[Event], limit: int = 6) -> list[dict[str, Any]]:
    out = []
    for e in sorted(events, key=lambda e: e.step)[:limit]:
        d = {"type": e.type, "step": e.step, "module": e.module, "from": e.from_, "to": e.to, "site": e.site}
        d.update({k: v for k, v in e.metrics.items() if v is not None})
        out.append(d)
    return out


def _spread_confidence(base: float, n: int, persistent: float) -> float:
    return min(0.95, (base + 0.08 * min(n, 3)) * (0.6 + 0.4 * persistent))


def _hyp(
    kind: Kind,
    confidence: float,
    origin: Event | None,
    step: int | None,
    summary: str,
    events: list[Event],
    suggestions: list[str],
    propagation: list[str] | None = None,
    fixes: list[dict[str, Any]] | None = None,
) -> Hypothesis:
    return Hypothesis(
        kind=kind,
        confidence=round(confidence, 3),
        origin=Origin(module=origin.module if origin else None, step=step, root=origin.root if origin else None),
        summary=summary,
        evidence=_evidence(events),
        propagation=propagation or [],
        suggestions=suggestions,
        fixes=fixes or [],
    )


def _model_has(ctx: Context, test: Callable[[str], bool]) -> bool:
    return any(test(t) for t in ctx.module_types().values())


def _names(events: list[Event]) -> list[str]:
    return sorted({e.module for e in events if e.module})


def _site_name(e: Event) -> str:
    """The module an event is about, for a sentence: a model that is one bare layer (nn.Linear) has no
    module name of its own, so its class stands for it."""
    return e.module or (f"the model {e.root}" if e.root else "the model")

"""Failure families: one module per family holds its classifiers, how its state machines are fed from a
StepRecord (its Observer), its rules (one per Kind) and their suggestions.

`FAMILIES` is the registry: the Monitor runs their observers on every StepRecord, in this order; the reasoner
runs `RULES`, theirs, in the contract's Kind order. What families share is in base.py (the Machine, the
family protocol), context.py (the Context a rule reads), evidence.py (the helpers that build a Hypothesis),
advice.py (learning-rate advice), settings.py (wrong settings with no Kind of their own) and causes.py (the
causal table); a large family keeps part of its observe side apart (loss_model.py, gradient_observer.py).
docs/adding-a-kind.md says how a new family is added. Pure: no torch, no I/O module."""

from __future__ import annotations

from collections.abc import Iterable

from neuraldbg_cli.reason.families import (
    activations,
    attention,
    data,
    gradients,
    loop,
    loss,
    lossfn,
    nonfinite,
    normalization,
    residual,
    weights,
)
from neuraldbg_cli.reason.families.base import Family
from neuraldbg_cli.reason.families.context import Rule
from neuraldbg_cli.trace.events import CROSS_RANK_KINDS, Kind

# observed in this order within a step: it fixes the order of one step's events in the trace
FAMILIES: tuple[Family, ...] = (
    data.FAMILY,
    activations.FAMILY,
    gradients.FAMILY,
    weights.FAMILY,
    loss.FAMILY,
    nonfinite.FAMILY,
    normalization.FAMILY,
    lossfn.FAMILY,
    residual.FAMILY,
    attention.FAMILY,
    loop.FAMILY,
)


def rules_of(families: Iterable[Family]) -> tuple[Rule, ...]:
    """The families' rules in the contract's Kind order (the order hypotheses are proposed in), once the
    registry is checked: every Kind judged in one run has exactly one rule, named after it and registered by
    exactly one family (the kinds judged across ranks have theirs in crossrank). Raises RuntimeError naming
    the culprit."""
    families = list(families)
    owners: dict[str, list[str]] = {}
    for family in families:
        for rule in family.rules:
            owners.setdefault(rule.__name__, []).append(family.name)
    judged = [k.value for k in Kind if k not in CROSS_RANK_KINDS]
    problems = [f"no rule for {k}" for k in judged if k not in owners]
    problems += [
        f"{name} is not a kind judged in one run ({', '.join(fs)})" for name, fs in owners.items() if name not in judged
    ]
    problems += [f"{name} registered {len(fs)} times ({', '.join(fs)})" for name, fs in owners.items() if len(fs) > 1]
    names = [f.name for f in families]
    problems += [f"family {n} registered twice" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise RuntimeError(f"neuraldbg families: {'; '.join(problems)}")
    rules = {rule.__name__: rule for family in families for rule in family.rules}
    return tuple(rules[k] for k in judged)


RULES: tuple[Rule, ...] = rules_of(FAMILIES)  # checked at import

"""Pure and replayable: a run directory's events -> ranked hypotheses (the explain report).

Rules propose one hypothesis per kind; then causes are ranked above their consequences: an effect that
starts no earlier than a known cause (CAUSES) has its confidence capped below the cause's and names it."""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Optional

from neuraldbg_cli.events import EventType, Hypothesis, Kind, ModelSummary, Report
from neuraldbg_cli.rules import AFTER_START, CAUSES, RULES, WINDOWED, Context
from neuraldbg_cli.trace import RunData


def build_context(run: RunData) -> Context:
    settings = run.meta.get("settings") if isinstance(run.meta.get("settings"), dict) else {}
    thresholds = settings.get("thresholds") if isinstance(settings.get("thresholds"), dict) else {}
    every, window = settings.get("every"), thresholds.get("loss_window")
    models = run.models.get("models") if isinstance(run.models.get("models"), list) else []
    opts = run.models.get("optimizers") if isinstance(run.models.get("optimizers"), list) else []
    return Context(events=run.events, models=[m for m in models if isinstance(m, dict)],
                   optimizers=[o for o in opts if isinstance(o, dict)], every=_count(every, 10),
                   loss_window=_count(window, 10))


def _count(value: object, default: int) -> int:
    return value if type(value) is int and 0 < value < 1 << 31 else default


def rank(hyps: list[Hypothesis], slack: int, loss_window: int = 0) -> list[Hypothesis]:
    """Demote consequences below causes that started no later (within `slack` steps; a loss oscillation,
    judged over two windows of `loss_window` losses, cannot be dated earlier than one window in), then order."""
    by_kind = {h.kind: h for h in hyps}
    for cause_kind, effects in CAUSES.items():
        cause = by_kind.get(cause_kind)
        if cause is None or cause.confidence < 0.5:
            continue
        for effect_kind in effects:
            effect = by_kind.get(effect_kind)
            if effect is None or effect.caused_by is not None:
                continue
            if (cause_kind, effect_kind) in AFTER_START and not effect.origin.step:
                continue
            margin = slack + (loss_window if cause_kind in WINDOWED else 0)
            if (cause.origin.step or 0) <= (effect.origin.step or 0) + margin:
                effect.confidence = round(min(effect.confidence, cause.confidence - 0.05) * 0.8, 3)
                effect.caused_by = cause_kind
                effect.summary += f" Likely a consequence of {cause_kind.value}."
    ordered = sorted(hyps, key=lambda h: (-h.confidence, h.origin.step if h.origin.step is not None else 1 << 30))
    for i, h in enumerate(ordered, 1):
        h.rank = i
    return ordered


def steps_observed(run: RunData) -> int:
    summary_type = EventType.run_summary.value  # looked up once: an Enum member's .value is slow per event
    summary = [e for e in run.events if e.type == summary_type]
    counts = [int(run.meta.get("steps_observed") or 0)]
    if summary:
        counts.append(int(summary[-1].metrics.get("steps") or 0))
    if run.events:
        counts.append(max(map(attrgetter("step"), run.events)) + 1 if len(run.events) > len(summary) else 0)
    return min(max(counts), (1 << 63) - 1)  # a corrupt count must not break the JSON report


def explain(run: RunData, min_confidence: float = 0.5) -> Report:
    ctx = build_context(run)
    hyps = [h for h in (rule(ctx) for rule in RULES) if h is not None]
    hyps = rank(hyps, slack=ctx.every, loss_window=ctx.loss_window)
    steps = steps_observed(run)
    warnings = list(run.warnings)
    state = run.meta.get("status")
    if state == "running" or (run.meta and "exit_status" not in run.meta):
        warnings.append("the run was cut short (killed before neuraldbg could record its end); "
                        "this explains what was observed up to then")
    if steps == 0 and not hyps:
        status = "no_training_observed"
    elif any(h.confidence >= min_confidence for h in hyps):
        status = "problems_found"
    else:
        status = "healthy"
    models = [ModelSummary(name=str(m.get("name")), modules=int(m.get("n_modules") or 0),
                           parameters=int(m.get("n_params") or 0)) for m in ctx.models]
    run_info = {k: run.meta.get(k) for k in ("script", "exit_status", "status", "start", "end") if k in run.meta}
    return Report(run_dir=str(run.dir), status=status, steps_observed=steps, models=models, hypotheses=hyps,
                  warnings=warnings, run=run_info)


def failing_kinds(report: Report, fail_on: list[str], min_confidence: float) -> list[str]:
    """Kinds named by --fail-on ('any' = all) that reach min_confidence in this report."""
    wanted: Optional[set[str]] = None if "any" in fail_on else set(fail_on)
    return [h.kind.value for h in report.hypotheses
            if h.confidence >= min_confidence and (wanted is None or h.kind.value in wanted)]


def verdict_lines(report: Report, min_confidence: float, limit: int = 3) -> list[str]:
    shown = [h for h in report.hypotheses if h.confidence >= min_confidence][:limit]
    if not shown:
        return [f"neuraldbg: {report.status.replace('_', ' ')} ({report.steps_observed} steps observed)"]
    lines = [f"neuraldbg: {report.status.replace('_', ' ')} ({report.steps_observed} steps observed)"]
    for h in shown:
        where = f" at {h.origin.module}" if h.origin.module else ""
        lines.append(f"  {h.rank}. {h.kind.value} ({h.confidence:.2f}){where}, step {h.origin.step}: {h.summary}")
    return lines


def kinds_checked(fail_on: list[str]) -> list[Kind]:
    if not fail_on or "any" in fail_on:
        return list(Kind)
    return [Kind(k) for k in fail_on]


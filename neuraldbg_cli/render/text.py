"""For people: verdict first, then each hypothesis with where, when, evidence and what to change."""

from __future__ import annotations

from neuraldbg_cli.reason.fixspec import verdicts
from neuraldbg_cli.trace.events import Kind, Report


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    lines = [
        f"neuraldbg explain {report.run_dir}",
        f"status: {report.status}   steps observed: {report.steps_observed}{_per_process(report)}",
    ]
    for m in report.models:
        lines.append(f"model: {m.name} ({m.modules} modules, {m.parameters:,} trainable parameters)")
    for w in report.warnings:
        lines.append(f"warning: {w}")
    shown = [h for h in report.hypotheses if h.confidence >= min_confidence]
    weak = [h for h in report.hypotheses if h.confidence < min_confidence]
    if not shown:
        lines.append("")
        lines.append(f"No problem found with confidence >= {min_confidence:.2f}.")
    for h in shown:
        lines.append("")
        where = f" in {h.origin.module}" if h.origin.module else ""
        if h.ranks is not None:
            unit = "process" if report.run.get("processes") else "rank"
            where += f" on {unit} {h.origin.rank}" + (
                f" ({unit}{'es' if unit == 'process' else 's'} {', '.join(map(str, h.ranks))})"
                if len(h.ranks) > 1
                else ""
            )
        lines.append(f"#{h.rank} {h.kind.value}  confidence {h.confidence:.2f}{where}, from step {h.origin.step}")
        lines.append(f"   {h.summary}")
        if h.caused_by and h.because:
            lines.append(f"   consequence of {h.caused_by.value}, because: {h.because}")
        if h.propagation:
            lines.append(
                "   propagation: " + " -> ".join(h.propagation[:10]) + (" …" if len(h.propagation) > 10 else "")
            )
        for ev in h.evidence[:3]:
            extra = ", ".join(
                f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in ev.items()
                if k not in ("type", "step", "module", "from", "to", "site")
            )
            where = ev.get("module") or ev.get("site") or (f"rank {ev['rank']}" if "rank" in ev else "-")
            lines.append(f"   evidence: step {ev['step']} {where}: {ev['from']} -> {ev['to']} ({extra})")
        for s in h.suggestions:
            lines.append(f"   try: {s}")
        lines += [f"   {line}" for _, line in verdicts(h.fixes)]
    if weak:
        lines.append("")
        lines.append("weaker signals: " + ", ".join(f"{h.kind.value} ({h.confidence:.2f})" for h in weak))
    return "\n".join(lines)


def _per_process(report: Report) -> str:
    """Child processes that each stepped their own optimizers: how many steps each took."""
    if not report.run.get("processes"):
        return ""
    ranks = report.run.get("ranks") or {}
    each = ", ".join(f"{r}: {v.get('steps_observed', '?')}" for r, v in sorted(ranks.items(), key=lambda x: int(x[0])))
    return f" in {report.run['processes']} processes ({each})"

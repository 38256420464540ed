"""GitHub Actions annotations: ::error for problems at or above min_confidence, ::warning below."""

from __future__ import annotations

from neuraldbg_cli.trace.events import Kind, Report


def _clean(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    lines = []
    for h in report.hypotheses:
        if h.kind not in checked:
            continue
        level = "error" if h.confidence >= min_confidence else "warning"
        title = f"neuraldbg {h.kind.value} ({h.confidence:.2f})"
        lines.append(f"::{level} title={_clean(title)}::{_clean(h.summary)}")
    if not lines:
        lines.append(f"::notice title=neuraldbg::{report.status} ({report.steps_observed} steps observed)")
    return "\n".join(lines)

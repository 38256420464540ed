"""`neuraldbg report`'s HTML page: see renderers/report/ (matplotlib figures, inline, self-contained)."""

from __future__ import annotations

from neuraldbg_cli.events import Kind, Report
from neuraldbg_cli.renderers.report import render_page

__all__ = ["render", "render_page"]


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    return render_page(report, [])

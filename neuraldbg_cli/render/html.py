"""`neuraldbg report`'s HTML page: see renderers/report/ (matplotlib figures, inline, self-contained)."""

from __future__ import annotations

from neuraldbg_cli.render.report import render_page
from neuraldbg_cli.trace.events import Kind, Report

__all__ = ["render", "render_page"]


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    return render_page(report, [])

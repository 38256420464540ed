"""Renderers: each `render(report, checked)` -> str. They read a Report only, never the model or the trace."""

from __future__ import annotations

from collections.abc import Callable

from neuraldbg_cli.events import Kind, Report
from neuraldbg_cli.renderers import github, json_, junit, text

Renderer = Callable[[Report, list[Kind], float], str]
RENDERERS: dict[str, Renderer] = {
    "text": text.render,
    "json": json_.render,
    "junit": junit.render,
    "github": github.render,
}

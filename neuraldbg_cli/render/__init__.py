"""render: what people and tools read. Renderers (text, json_, junit, github, html) each turn a Report into a
str; report/ builds the self-contained HTML page with its figures; export writes TensorBoard scalars and text.
They read a Report and trace data only, never the model: no torch, no probe, no launch."""

from __future__ import annotations

from collections.abc import Callable

from neuraldbg_cli.render import github, json_, junit, text
from neuraldbg_cli.trace.events import Kind, Report

Renderer = Callable[[Report, list[Kind], float], str]
RENDERERS: dict[str, Renderer] = {
    "text": text.render,
    "json": json_.render,
    "junit": junit.render,
    "github": github.render,
}

"""`neuraldbg report`: one self-contained HTML page. The loss with the events' and hypotheses' onsets, then
per-layer heatmaps (layer in forward order x step) of gradient RMS, dead/saturated activations and the
update-to-weight ratio: where a failure starts and how it spreads; then per-layer rows of the architecture
statistics (arch.py). Each hypothesis links to its evidence's row. Pure: reads the report, the stats rows, the events and model.json's description; never torch."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from neuraldbg_cli.render.report import arch
from neuraldbg_cli.render.report import grid as grids
from neuraldbg_cli.render.report.page import Link, Section, overlay, page
from neuraldbg_cli.trace.events import Hypothesis, Kind, Report

SECTIONS = {  # anchor suffix: (title, what to look for, said when there is nothing to draw)
    "loss": (
        "Loss",
        "The loss per step; ticks along the top mark the monitor's events, dashed lines the onset of "
        "each hypothesis (#rank); red crosses along the bottom, if any, steps whose loss was NaN/Inf.",
        "no loss was recorded",
    ),
    "grad": (
        "Gradient RMS per layer",
        "Input side at the top, output side at the bottom. Vanishing gradients "
        "darken toward the top rows; an explosion is a bright band spreading across rows; red cells are "
        "NaN/Inf, grey ones layers without a gradient.",
        "no gradient statistics were recorded",
    ),
    "act": (
        "Dead or saturated activations per layer",
        "Fraction of units that never fire (ReLU-like) or sit at "
        "the rails (sigmoid/tanh) after each layer: bright rows are layers that stopped passing signal.",
        "no activation function was observed",
    ),
    "update": (
        "Update-to-weight ratio per layer",
        "How far one optimizer step moves each layer's weights, "
        "relative to their size: around 1e-3 is typical, near 1 the learning rate is far too large; "
        "magenta means the weights did not move.",
        "no optimizer step was observed",
    ),
    "arch": (
        "Architecture statistics per layer",
        "First → last sampled value of each layer (the extreme between in brackets). Normalisation: running "
        "statistics against the batch's (mean shift in running σ, |ln var ratio|: near 0 when they describe the "
        "batches) and the gain; residual blocks: the branch's RMS against its skip path's (healthy 0.1-3); "
        "attention: the largest logit and the rows' entropy (near 0: each row on one key); how each loss was called.",
        "no normalisation layer, residual block, attention layer or loss call was read",
    ),
}
# The plot that shows a kind's evidence; non_finite follows its origin's site.
KIND_PLOT = {
    Kind.vanishing_gradient: "grad",
    Kind.exploding_gradient: "grad",
    Kind.no_gradient: "grad",
    Kind.dead_activation: "act",
    Kind.saturated_activation: "act",
    Kind.unchanged_weights: "update",
}
SITE_PLOT = {"gradient": "grad", "output": "act", "activation": "act", "weights": "update"}


def render_page(
    report: Report, stats: list[dict[str, Any]], events: Iterable[Any] = (), models: dict[str, Any] | None = None
) -> str:
    stats = [r for r in stats if isinstance(r, dict) and type(r.get("step")) is int and r["step"] >= 0]
    models = models or {}
    states = grids.States(events := list(events))
    axis = grids.step_axis(stats)
    sections = {
        name: Section(f"plot-{name}", title, how, empty=empty) for name, (title, how, empty) in SECTIONS.items()
    }
    if axis is not None:
        _draw(sections, report, stats, axis, models, states, events)
    sections["arch"].body = arch.tables(stats, models)
    links = {h.rank: link for h in report.hypotheses if (link := _link(h, sections, axis))}
    return page(report, list(sections.values()), links)


def _draw(
    sections: dict[str, Section],
    report: Report,
    stats: list[dict[str, Any]],
    axis: grids.Axis,
    models: dict[str, Any],
    states: grids.States,
    events: list[Any],
) -> None:
    # matplotlib is loaded only when there is something to draw; its notices (a slow first font-cache build)
    # are not the report's to print: `report` prints one line, the page's path
    logging.getLogger("matplotlib").setLevel(logging.ERROR)
    from neuraldbg_cli.render.report import plots
    from neuraldbg_cli.render.report.series import loss_data

    loss = loss_data(stats, states)
    if loss.series:
        marks = [(ev.step, ev.type) for ev in events if ev.type != "run_summary"]
        onsets = [(h.origin.step, h.rank) for h in report.hypotheses if h.origin.step is not None]
        _drawn(sections["loss"], plots.loss_plot, loss, axis, _thin(marks, axis), onsets)
    for name in ("grad", "act", "update"):
        g = grids.build(name, stats, axis, models, states)
        if g is None:
            continue
        s = sections[name]
        s.grid, s.title = g, g.title
        onset_marks = [
            (h.rank, row, h.origin.step)
            for h in report.hypotheses
            if _plot_of(h) == name and (row := _row(h, g)) is not None
        ]
        _drawn(s, plots.heatmap, g, onset_marks)


def _drawn(section: Section, draw: Callable[..., Any], *args: Any) -> None:
    """A figure matplotlib cannot draw (values at the float limits in a hand-edited trace) becomes a note
    in its section; the rest of the report still comes out."""
    try:
        section.figure = draw(*args)
    except (ValueError, ArithmeticError) as e:  # numpy's LinAlgError is a ValueError
        section.empty = f"could not draw this plot ({type(e).__name__}: {e})"


def _thin(marks: list[tuple[int, str]], axis: grids.Axis) -> list[tuple[int, str]]:
    """At most one mark per type and column: 200k events draw as a few thousand ticks."""
    seen: dict[tuple[str, int], int] = {}
    for step, etype in marks:
        seen.setdefault((etype, axis.column(step) if axis.start <= step < axis.stop else -1), step)
    return [(step, etype) for (etype, col), step in seen.items() if col >= 0]


def _plot_of(h: Hypothesis) -> str:
    if h.kind in KIND_PLOT:
        return KIND_PLOT[h.kind]
    sites = [e.get("site") or "" for e in h.evidence if e.get("module") == h.origin.module]
    return SITE_PLOT.get(sites[0] if sites else "", "grad" if h.origin.module else "loss")


def _row(h: Hypothesis, g: grids.Grid) -> int | None:
    if not h.origin.module:
        return None
    for i, key in enumerate(g.rows):
        root, _, module = key.partition("|")
        if module == h.origin.module and (h.origin.root in (None, root)):
            return i
    return None


def _link(h: Hypothesis, sections: dict[str, Section], axis: grids.Axis | None) -> Link | None:
    """The hypothesis's own plot with its origin row highlighted; else another heatmap holding that row;
    else the loss with its onset step highlighted."""
    oid = f"hl-{h.rank}"
    first = _plot_of(h)
    for name in dict.fromkeys([first, "grad", "update", "act"]):
        s = sections.get(name)
        if s is None or s.grid is None or s.figure is None or (row := _row(h, s.grid)) is None:
            continue
        left, top, width, height = s.figure.box
        n = len(s.grid.rows)
        overlay(s, oid, left, top + height * row / n, width, height / n)
        return Link(s, oid, f"row {s.grid.labels[row]}")
    s = sections["loss"] if first == "loss" or sections[first].figure is None else sections[first]
    if s.figure is None or axis is None:
        return None
    left, top, width, height = s.figure.box
    step = h.origin.step if h.origin.step is not None else axis.start
    span = axis.stop - axis.start
    centre = min(max((step + 0.5 - axis.start) / span, 0.0), 1.0)  # the step's column, at least 0.8% wide
    band = max(1 / span, 0.008 / width)
    overlay(s, oid, left + width * (centre - band / 2), top, width * band, height)
    return Link(s, oid, f"step {step}")

"""matplotlib figures of the report, as inline SVG (text stays text; a heatmap is one embedded image at one
pixel per cell). Every figure has the same width and the same left/right margins, so the step axes of the
loss curve and of the heatmaps line up on the page."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps, patheffects, rc_context
from matplotlib.cm import ScalarMappable
from matplotlib.colors import ListedColormap, LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.ticker import LogLocator, MaxNLocator

from neuraldbg_cli.render.report.grid import ABSENT, LEVELS, NODATA, NONFINITE, SPECIAL_NAMES, ZERO, Axis, Grid
from neuraldbg_cli.render.report.series import LossData

FIG_W, LEFT, RIGHT, DPI = 12.0, 2.2, 1.5, 100  # inches; axes 8.3 in = 830 px >= grid.MAX_COLUMNS
AXES_WIDTH_IN = FIG_W - LEFT - RIGHT
MAX_LABELS = 45  # layer names on the y axis; the hover names every row
SCALE = "viridis"  # no red, magenta or grey in it: those are the special cells
COLORS = {ZERO: "#ff00ff", NONFINITE: "#e00000", ABSENT: "#9a9a9a", NODATA: "#ffffff"}
EVENT_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf", "#7f7f7f"]


@dataclass
class Svg:
    svg: str
    box: tuple[float, float, float, float]  # the axes: left, top, width, height as fractions of the figure


def colormap() -> ListedColormap:
    """Code -> colour: the scale for 0..LEVELS-1, then the special codes in their order."""
    return ListedColormap(
        [*colormaps[SCALE](np.linspace(0, 1, LEVELS)), *(COLORS[c] for c in (ZERO, NONFINITE, ABSENT, NODATA))]
    )


def heatmap(grid: Grid, marks: list[tuple[int, int, int | None]]) -> Svg:
    """marks: (hypothesis rank, row, onset step) drawn as a ringed "#rank" on the grid."""
    n, ax_h = len(grid.rows), min(7.0, max(1.8, 0.22 * len(grid.rows)))
    top, bottom = 0.15, 1.05
    fig, ax = _figure(ax_h, top, bottom)
    a = grid.axis
    ax.imshow(
        grid.codes,
        cmap=colormap(),
        vmin=-0.5,
        vmax=NODATA + 0.5,
        aspect="auto",
        interpolation="none",
        extent=(a.start, a.stop, n, 0),
    )
    every = max(1, -(-n // MAX_LABELS))
    ax.set_yticks([i + 0.5 for i in range(0, n, every)])
    ax.set_yticklabels([_short(grid.labels[i]) for i in range(0, n, every)], fontsize=8 if n <= 30 else 7)
    ax.set_ylabel("layer (forward order" + (f"; one name per {every})" if every > 1 else ")"))
    _step_axis(ax, a)
    for rank, row, step in marks:
        x = min(max(step if step is not None else a.start, a.start), a.stop - 1) + 0.5
        ax.plot([x], [row + 0.5], marker="o", ms=11, mfc="none", mec="black", mew=3, clip_on=False)
        ax.plot([x], [row + 0.5], marker="o", ms=11, mfc="none", mec="white", mew=1.5, clip_on=False)
        ax.annotate(
            f"#{rank}",
            (x, row + 0.5),
            xytext=(9, -3),
            textcoords="offset points",
            fontsize=9,
            fontweight="bold",
            color="white",
            path_effects=_outline(),
        )
    cax = fig.add_axes(_colorbar_box(fig, ax))
    norm = LogNorm(grid.lo, grid.hi) if grid.log else Normalize(grid.lo, grid.hi)
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=SCALE), cax=cax)
    bar.set_label(grid.scale_label, fontsize=8)
    if grid.log:
        cax.yaxis.set_major_locator(LogLocator(numticks=int(2 + 1.5 * ax_h)))
    fig.legend(
        handles=[Patch(facecolor=COLORS[c], edgecolor="#555", label=SPECIAL_NAMES[c]) for c in grid.specials],
        loc="lower left",
        bbox_to_anchor=(LEFT / FIG_W, 0.0),
        ncol=4,
        frameon=False,
        fontsize=8,
    )
    return _svg(fig, ax, grid.name)


def loss_plot(loss: LossData, axis: Axis, events: list[tuple[int, str]], onsets: list[tuple[int, int]]) -> Svg:
    """events: (step, type) of the semantic events; onsets: (step, rank) of the hypotheses."""
    fig, ax = _figure(2.6, 0.45, 1.05)
    if loss.log:  # only where every finite loss is > 0 (series.loss_data): nothing is hidden by it
        ax.set_yscale("log")
    handles = []
    for i, (name, steps, values) in enumerate(loss.series):
        color = "#222222" if i == 0 else EVENT_COLORS[i % len(EVENT_COLORS)]
        handles += _curve(ax, axis, steps, values, name, color)
    ax.set_ylabel("loss (log scale)" if loss.log else "loss")
    _step_axis(ax, axis)
    handles += _loss_marks(ax, loss, axis) + _event_marks(ax, events) + _onset_marks(ax, onsets)
    fig.legend(handles=handles, loc="lower left", bbox_to_anchor=(LEFT / FIG_W, 0.0), ncol=4, frameon=False, fontsize=8)
    return _svg(fig, ax, "loss")


def _loss_marks(ax, loss: LossData, axis: Axis) -> list:
    """Steps without a finite loss, along the bottom: one mark per column, however many steps it holds."""
    handles = []
    for steps, color, label, marker in (
        (loss.nonfinite, COLORS[NONFINITE], "loss NaN / Inf", "x"),
        (loss.missing, COLORS[ABSENT], "no loss recorded", "|"),
    ):
        if steps:
            xs = np.asarray(sorted({axis.column(s): s for s in reversed(steps)}.values())) + 0.5
            ax.scatter(
                xs,
                np.full(len(xs), 0.03),
                transform=ax.get_xaxis_transform(),
                marker=marker,
                s=30,
                color=color,
                clip_on=False,
                zorder=3,
            )
            handles.append(Line2D([], [], ls="", marker=marker, color=color, label=label))
    return handles


def _event_marks(ax, events: list[tuple[int, str]]) -> list:
    """A row of ticks per event type along the top."""
    handles = []
    for k, t in enumerate(dict.fromkeys(t for _, t in events)):
        xs = np.asarray(sorted({s for s, tt in events if tt == t}), dtype=float) + 0.5
        color = EVENT_COLORS[k % len(EVENT_COLORS)]
        ax.scatter(
            xs,
            np.full(len(xs), 1.0 - 0.045 * (k + 1)),
            transform=ax.get_xaxis_transform(),
            marker="|",
            s=110,
            linewidths=2,
            color=color,
            clip_on=False,
            zorder=3,
        )
        handles.append(Line2D([], [], ls="", marker="|", color=color, label=f"event: {t}"))
    return handles


def _onset_marks(ax, onsets: list[tuple[int, int]]) -> list:
    """A dashed line at each hypothesis's onset, labelled with the ranks that begin there."""
    by_step: dict[int, list[int]] = {}
    for step, rank in onsets:
        by_step.setdefault(step, []).append(rank)
    for step, ranks in by_step.items():
        ax.axvline(step + 0.5, color="#c00000", ls="--", lw=1)
        ax.text(
            step + 0.5,
            1.02,
            " ".join(f"#{r}" for r in ranks),
            transform=ax.get_xaxis_transform(),
            color="#c00000",
            fontsize=9,
            fontweight="bold",
            ha="center",
            va="bottom",
        )
    return [Line2D([], [], color="#c00000", ls="--", label="hypothesis onset (#rank)")] if by_step else []


def _curve(ax, axis: Axis, steps: np.ndarray, values: np.ndarray, name: str, color: str) -> list:
    """Up to 2 points per column the line itself; more are binned per column: min..max band and mean.
    Non-finite values are left to the NaN marks of loss_plot."""
    ok = np.isfinite(values)
    steps, values = steps[ok] + 0.5, values[ok]
    if not steps.size:
        return []
    if steps.size <= 2 * axis.columns:
        ax.plot(steps, values, color=color, lw=1.2, marker="." if steps.size <= 120 else None, ms=3)
        return [Line2D([], [], color=color, label=name)]
    cols = np.minimum(axis.columns - 1, ((steps - 0.5 - axis.start) / axis.width).astype(int))
    starts = np.flatnonzero(np.r_[True, np.diff(cols) != 0])
    counts = np.diff(np.r_[starts, steps.size])
    x = axis.start + (cols[starts] + 0.5) * axis.width
    ax.fill_between(
        x,
        np.minimum.reduceat(values, starts),
        np.maximum.reduceat(values, starts),
        color=color,
        alpha=0.25,
        lw=0,
        step="mid",
    )
    ax.plot(x, np.add.reduceat(values, starts) / counts, color=color, lw=1)
    return [
        Line2D([], [], color=color, label=f"{name} (mean per {axis.width:.3g} steps)"),
        Patch(facecolor=color, alpha=0.25, label=f"{name}: min..max"),
    ]


def _figure(ax_h: float, top: float, bottom: float):
    fig = Figure(figsize=(FIG_W, ax_h + top + bottom), dpi=DPI)
    h = ax_h + top + bottom
    ax = fig.add_axes((LEFT / FIG_W, bottom / h, AXES_WIDTH_IN / FIG_W, ax_h / h))
    return fig, ax


def _colorbar_box(fig, ax) -> tuple[float, float, float, float]:
    x0, y0, w, h = ax.get_position().bounds
    return (x0 + w + 0.15 / FIG_W, y0, 0.18 / FIG_W, h)


def _step_axis(ax, axis: Axis) -> None:
    ax.set_xlim(axis.start, axis.stop)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=12, integer=True))
    ax.set_xlabel("optimizer step")
    ax.grid(axis="x", color="#00000022", lw=0.6)


def _outline() -> list:
    return [patheffects.withStroke(linewidth=2.5, foreground="black")]


def _short(label: str, width: int = 30) -> str:
    return label if len(label) <= width else label[: width // 2 - 1] + "…" + label[-(width // 2 - 1) :]


def _svg(fig: Figure, ax, name: str) -> Svg:
    """Inline SVG. Each figure gets its own hash salt, so the ids matplotlib derives (clip paths, markers)
    differ between the figures of one page, and the ids nothing refers to are dropped (figure_1, axes_1, ...
    in every figure); metadata without a date keeps the page reproducible."""
    x0, y0, w, h = ax.get_position().bounds
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": f"neuraldbg-{name}"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r"<svg \1", svg, count=1)  # the page sizes it
    used = set(re.findall(r'(?:url\(#|href="#)([^")]+)', svg))  # ids nothing points at would repeat per figure
    svg = re.sub(r' id="([^"]+)"', lambda m: m.group(0) if m.group(1) in used else "", svg)
    return Svg(svg, (x0, 1 - y0 - h, w, h))

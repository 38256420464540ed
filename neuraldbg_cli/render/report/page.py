"""The HTML around the figures: header, hypothesis cards, plot sections with their highlight overlays and
hover readout. Everything inline (CSS, a few lines of JS, SVG), so the file opens offline."""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass, field
from html import escape
from typing import Any

from neuraldbg_cli.reason.fixspec import verdicts
from neuraldbg_cli.render.report.grid import LEVELS, SPECIAL_NAMES, Grid
from neuraldbg_cli.render.report.plots import Svg
from neuraldbg_cli.trace.events import Hypothesis, Report

MAX_EVIDENCE = 20  # evidence rows shown per hypothesis; the rest are counted


@dataclass
class Section:
    anchor: str  # plot-loss, plot-grad, ...
    title: str
    how: str  # what to look for, one or two sentences
    figure: Svg | None = None
    grid: Grid | None = None
    overlays: list[str] = field(default_factory=list)
    empty: str = ""
    body: str = ""  # HTML shown instead of a figure (the architecture tables)


@dataclass
class Link:
    """Where a hypothesis's evidence is drawn: a section, and the overlay that highlights its row or onset."""

    section: Section
    overlay_id: str
    what: str  # "row layers.0", "step 3"


def overlay(section: Section, overlay_id: str, left: float, top: float, width: float, height: float) -> None:
    section.overlays.append(
        f'<div class="hl" id="{overlay_id}" style="left:{100 * left:.3f}%;top:{100 * top:.3f}%;'
        f'width:{100 * width:.3f}%;height:{100 * height:.3f}%"></div>'
    )


def page(report: Report, sections: list[Section], links: dict[int, Link]) -> str:
    warn = "".join(f"<p class='warn'>warning: {escape(w)}</p>" for w in report.warnings)
    models = ", ".join(f"{escape(m.name)} ({m.modules} modules, {m.parameters:,} parameters)" for m in report.models)
    nav = " · ".join(f"<a href='#{s.anchor}'>{escape(s.title)}</a>" for s in sections)
    hyps = "".join(_hypothesis(h, links.get(h.rank)) for h in report.hypotheses)
    return (
        f"<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>neuraldbg report: {escape(report.run_dir)}</title><style>{CSS}</style></head><body>"
        f"<header><h1>neuraldbg report</h1><p><code>{escape(report.run_dir)}</code> · status "
        f"<b class='status {escape(report.status)}'>{escape(report.status)}</b> · {report.steps_observed:,} "
        f"steps observed{' · ' + models if models else ''}</p>{warn}<nav>Hypotheses · {nav}</nav></header>"
        f"<section id='hypotheses'><h2>Hypotheses, most likely root cause first</h2>"
        f"<ol class='hyps'>{hyps or '<li>none: no problem found</li>'}</ol></section>"
        f"{''.join(_section(s) for s in sections)}<script>{JS}</script></body></html>"
    )


def _hypothesis(h: Hypothesis, link: Link | None) -> str:
    where = (
        f"in <b>{escape(h.origin.module)}</b>" + (f" of {escape(h.origin.root)}" if h.origin.root else "")
        if h.origin.module
        else "whole model"
    )
    when = f", from step {h.origin.step}" if h.origin.step is not None else ""
    parts = [
        f"<h3>#{h.rank} {escape(h.kind.value)} <span class='conf'>confidence {h.confidence:.2f}</span></h3>",
        f"<p class='where'>{where}{when}</p><p>{escape(h.summary)}</p>",
    ]
    if h.caused_by:
        because = f": {escape(h.because)}" if h.because else ""
        parts.append(f"<p>likely a consequence of <b>{escape(h.caused_by.value)}</b>{because}</p>")
    if h.propagation:
        parts.append(f"<p>propagation: {' → '.join(escape(p) for p in h.propagation)}</p>")
    if h.evidence:
        rows = "".join(_evidence_row(e) for e in h.evidence[:MAX_EVIDENCE])
        more = f"<p>… and {len(h.evidence) - MAX_EVIDENCE} more</p>" if len(h.evidence) > MAX_EVIDENCE else ""
        parts.append(
            f"<details><summary>evidence ({len(h.evidence)})</summary><table><tr><th>step</th><th>where</th>"
            f"<th>change</th><th>metrics</th></tr>{rows}</table>{more}</details>"
        )
    if h.suggestions:
        parts.append("<p>try:</p><ul>" + "".join(f"<li>{escape(s)}</li>" for s in h.suggestions) + "</ul>")
    checked = "".join(f"<li class='{status}'>{escape(line)}</li>" for status, line in verdicts(h.fixes))
    if checked:
        parts.append(f"<p>checked by <code>neuraldbg verify</code>:</p><ul class='verdicts'>{checked}</ul>")
    if link:
        parts.append(
            f"<p><a class='show' href='#{link.overlay_id}'>show on the plot: {escape(link.section.title)}, "
            f"{escape(link.what)} ↓</a></p>"
        )
    return f"<li class='hyp' id='hyp-{h.rank}'>{''.join(parts)}</li>"


def _evidence_row(e: dict[str, Any]) -> str:
    raw = e.get("metrics")
    metrics = raw if isinstance(raw, dict) else {}
    text = ", ".join(f"{k}={v:.3g}" if isinstance(v, (int, float)) else f"{k}={v}" for k, v in metrics.items())
    return (
        f"<tr><td>{escape(str(e.get('step', '')))}</td><td>{escape(str(e.get('module') or e.get('site') or ''))}"
        f"</td><td>{escape(str(e.get('from', '')))} → {escape(str(e.get('to', '')))}</td>"
        f"<td>{escape(text)}</td></tr>"
    )


def _section(s: Section) -> str:
    head = f"<section id='{s.anchor}'><h2>{escape(s.title)}</h2><p class='how'>{escape(s.how)}</p>"
    if s.figure is None:
        inner = s.body or f"<p class='empty'>{escape(s.empty)}</p>"
        return f"{head}{inner}</section>"
    data = f" data-grid='{escape(json.dumps(_hover_data(s.grid, s.figure)), quote=True)}'" if s.grid else ""
    cls = "plot heat" if s.grid else "plot"
    return (
        f"{head}<div class='{cls}'{data}>{s.figure.svg}{''.join(s.overlays)}"
        f"<div class='tip' hidden></div></div></section>"
    )


def _hover_data(g: Grid, fig: Svg) -> dict[str, Any]:
    f = math.log10 if g.log else float
    return {
        "rows": g.labels,
        "cols": g.axis.columns,
        "start": g.axis.start,
        "width": g.axis.width,
        "box": [round(v, 5) for v in fig.box],
        "lo": f(g.lo),
        "hi": f(g.hi),
        "log": g.log,
        "levels": LEVELS,
        "unit": g.scale_label.split(" (")[0],
        "special": {str(c): SPECIAL_NAMES[c] for c in SPECIAL_NAMES},
        "codes": base64.b64encode(g.codes.tobytes()).decode(),
    }


CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1240px;margin:0 auto;padding:0 16px;
color:#111;line-height:1.4}
header p{margin:.3em 0} nav{margin:.6em 0;font-size:.95em} code{font-size:.95em}
.status.problems_found{color:#b00000} .status.healthy{color:#116611}
.warn{color:#a60;margin:.2em 0} .how{color:#444;margin:.2em 0 .6em} .empty{color:#777;font-style:italic}
.hyps{padding-left:1.4em} .hyp{border:1px solid #ddd;border-radius:6px;padding:.5em .9em;margin:.7em 0}
.hyp h3{margin:.2em 0} .conf{font-weight:normal;color:#555;font-size:.85em} .where{color:#333;margin:.2em 0}
.hyp:target{border-color:#c00000} details table,table.arch{border-collapse:collapse;font-size:.85em}
.verdicts .verified{color:#116611} .verdicts .partial{color:#8a6d00} .verdicts .not_verified{color:#b00000} .verdicts .worse{color:#b00000;font-weight:bold} .verdicts .inconclusive{color:#666}
td,th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}
.plot{position:relative;width:100%} .plot svg{display:block;width:100%;height:auto}
.plot svg image{image-rendering:pixelated}
.hl{position:absolute;pointer-events:none;min-height:4px;box-sizing:border-box}
.hl:target{outline:3px solid #ffd400;box-shadow:0 0 0 5px #000a;background:#ffd40033}
.tip{position:absolute;pointer-events:none;background:#000d;color:#fff;font-size:12px;padding:3px 6px;
border-radius:3px;white-space:nowrap;z-index:2}
"""

JS = """
for (const box of document.querySelectorAll('.heat')) {
  const g = JSON.parse(box.dataset.grid), raw = atob(g.codes), tip = box.querySelector('.tip');
  box.addEventListener('mousemove', e => {
    const r = box.getBoundingClientRect();
    const cx = ((e.clientX - r.left) / r.width - g.box[0]) / g.box[2];
    const cy = ((e.clientY - r.top) / r.height - g.box[1]) / g.box[3];
    if (cx < 0 || cx >= 1 || cy < 0 || cy >= 1) { tip.hidden = true; return; }
    const j = Math.floor(cx * g.cols), i = Math.floor(cy * g.rows.length), c = raw.charCodeAt(i * g.cols + j);
    const a = Math.ceil(g.start + j * g.width), b = Math.max(a, Math.ceil(g.start + (j + 1) * g.width) - 1);
    let v = g.special[c];
    if (v === undefined) {
      const f = g.lo + (c + 0.5) / g.levels * (g.hi - g.lo);
      v = g.unit + ' ≈ ' + (g.log ? Math.pow(10, f) : f).toPrecision(2);
    }
    tip.textContent = g.rows[i] + ' · step ' + (a === b ? a : a + '–' + b) + ' · ' + v;
    tip.style.left = (e.clientX - r.left + 14) + 'px'; tip.style.top = (e.clientY - r.top + 14) + 'px';
    tip.hidden = false;
  });
  box.addEventListener('mouseleave', () => { tip.hidden = true; });
  box.dataset.ready = raw.length === g.rows.length * g.cols ? 'yes' : 'bad size';  // tests read it in the DOM
}
"""

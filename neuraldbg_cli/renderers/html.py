"""Self-contained HTML report: verdict, hypotheses, and inline SVG plots (loss; gradient RMS per layer)."""
from __future__ import annotations

import math
from html import escape
from typing import Any

from neuraldbg_cli.events import Kind, Report

W, H, PAD = 640, 220, 40
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def _polyline(points: list[tuple[float, float]], xr: tuple[float, float], yr: tuple[float, float], color: str) -> str:
    (x0, x1), (y0, y1) = xr, yr
    sx = (W - 2 * PAD) / ((x1 - x0) or 1)
    sy = (H - 2 * PAD) / ((y1 - y0) or 1)
    pts = " ".join(f"{PAD + (x - x0) * sx:.1f},{H - PAD - (y - y0) * sy:.1f}" for x, y in points)
    return f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{pts}"/>'


def _plot(title: str, series: dict[str, list[tuple[float, float]]], log: bool) -> str:
    clean = {k: [(x, math.log10(y) if log else y) for x, y in v
                 if isinstance(y, (int, float)) and math.isfinite(y) and (y > 0 or not log)] for k, v in series.items()}
    clean = {k: v for k, v in clean.items() if v}
    if not clean:
        return f"<h3>{escape(title)}</h3><p>no data</p>"
    xs = [x for v in clean.values() for x, _ in v]
    ys = [y for v in clean.values() for _, y in v]
    xr, yr = (min(xs), max(xs)), (min(ys), max(ys))
    lines = [_polyline(v, xr, yr, COLORS[i % len(COLORS)]) for i, v in enumerate(clean.values())]
    label = (lambda y: f"1e{y:.0f}") if log else (lambda y: f"{y:.3g}")
    axes = (f'<text x="4" y="{PAD}" font-size="11">{label(yr[1])}</text>'
            f'<text x="4" y="{H - PAD}" font-size="11">{label(yr[0])}</text>'
            f'<text x="{PAD}" y="{H - 8}" font-size="11">step {xr[0]:.0f}</text>'
            f'<text x="{W - PAD - 60}" y="{H - 8}" font-size="11">step {xr[1]:.0f}</text>')
    legend = "".join(f'<span style="color:{COLORS[i % len(COLORS)]}">■ {escape(k)}</span> '
                     for i, k in enumerate(list(clean)[:12]))
    return (f"<h3>{escape(title)}</h3><svg width='{W}' height='{H}' style='border:1px solid #ddd'>"
            f"{axes}{''.join(lines)}</svg><div style='font-size:12px'>{legend}</div>")


def render_page(report: Report, stats: list[dict[str, Any]]) -> str:
    losses = [(r["step"], r["loss"]) for r in stats if isinstance(r.get("loss"), (int, float))]
    grads: dict[str, list[tuple[float, float]]] = {}
    for r in stats:
        for key, val in (r.get("grads") or {}).items():
            if isinstance(val, list) and val and isinstance(val[0], (int, float)):
                grads.setdefault(key.split("|", 1)[-1], []).append((r["step"], val[0]))
    if len(grads) > 10:  # keep the plot readable: first, last and evenly spaced layers
        keys = list(grads)
        pick = sorted({round(i * (len(keys) - 1) / 9) for i in range(10)})
        grads = {keys[i]: grads[keys[i]] for i in pick}
    hyps = "".join(
        f"<li><b>{escape(h.kind.value)}</b> ({h.confidence:.2f}) at {escape(str(h.origin.module))}, step "
        f"{h.origin.step}: {escape(h.summary)}<ul>{''.join(f'<li>{escape(s)}</li>' for s in h.suggestions)}</ul></li>"
        for h in report.hypotheses)
    warn = "".join(f"<p style='color:#a60'>warning: {escape(w)}</p>" for w in report.warnings)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>neuraldbg {escape(report.run_dir)}</title>"
            f"</head><body style='font-family:sans-serif;max-width:760px;margin:auto'>"
            f"<h1>neuraldbg report</h1><p>{escape(report.run_dir)} — status <b>{escape(report.status)}</b>, "
            f"{report.steps_observed} steps observed</p>{warn}<h2>Hypotheses</h2><ol>{hyps or '<li>none</li>'}</ol>"
            f"{_plot('loss', {'loss': losses}, log=False)}{_plot('gradient norm per layer (log10)', grads, log=True)}"
            f"</body></html>")


def render(report: Report, checked: list[Kind], min_confidence: float) -> str:
    return render_page(report, [])

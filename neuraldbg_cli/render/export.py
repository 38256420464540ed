"""Export a run to TensorBoard, so its statistics, events and verdict sit next to the user's own logs.

Like a renderer it reads what the trace and the reasoner produced (stats.jsonl rows, events, a Report), never the
model. It writes with tensorboard's own event-file writer and summary protos (the pieces torch's SummaryWriter
is built on), so an export needs neither torch nor TensorFlow; tensorboard itself is an optional extra."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.trace.events import ACT_FIELDS, Report

INSTALL_HINT = "pip install 'neuraldbg[tensorboard]'"

# a stats.jsonl "acts" list holds ActStats' fields after n (tracewriter._stats_row)
MEAN, STD, MIN, MAX, ZERO, DEAD, SAT01, SAT11, NONFINITE = (ACT_FIELDS.index(f) - 1 for f in ACT_FIELDS[1:])
MAX_STEP = 2**63  # an event's step is an int64


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _dict(v: Any) -> dict[Any, Any]:
    return v if isinstance(v, dict) else {}


def _scalars(row: dict[str, Any], several_roots: bool) -> Iterator[tuple[str, Any]]:
    """(tag, value as the row holds it: the caller keeps the numbers) for one stats row. Tags start with the
    statistic, so TensorBoard groups a statistic's layers together; the root model's name is kept only when
    several models were trained."""

    def name(key: str) -> str:  # "root|module" or "root|module|site"
        root, module, *site = key.split("|")
        module = module or (site[0] if site else root)  # the model's own input and a loss's targets
        return f"{root}/{module}" if several_roots and root else module

    losses = row.get("losses")
    if isinstance(losses, dict) and losses:  # one series per model trained by its own optimizer
        yield from ((f"loss/{series}", v) for series, v in losses.items())
    else:
        yield "loss", row.get("loss")
    acts_by_key = _dict(row.get("acts"))
    for key, acts in acts_by_key.items():
        if not (isinstance(acts, list) and len(acts) > NONFINITE and isinstance(key, str) and key.count("|") == 2):
            continue
        site = key.rsplit("|", 1)[1]
        if site == "activation":
            yield f"dead_frac/{name(key)}", acts[DEAD]
            yield f"zero_frac/{name(key)}", acts[ZERO]
            if _number(acts[SAT01]) and _number(acts[SAT11]):  # only the one matching the activation's range is set
                yield f"saturated_frac/{name(key)}", max(acts[SAT01], acts[SAT11])
        elif site == "output":
            yield f"output_mean/{name(key)}", acts[MEAN]
            yield f"output_std/{name(key)}", acts[STD]
        else:  # data: the model's input, a loss's targets
            for stat, i in (("mean", MEAN), ("std", STD), ("min", MIN), ("max", MAX), ("nonfinite", NONFINITE)):
                yield f"data_{stat}/{name(key)}", acts[i]
    updates = _dict(row.get("updates"))
    for key, grad in (row.get("grads") or {}).items():
        if not (isinstance(grad, list) and len(grad) == 2 and isinstance(key, str)):
            continue
        norm, weight = grad
        yield f"grad_norm/{name(key)}", norm
        yield f"weight_norm/{name(key)}", weight
        update = updates.get(key)
        if _number(update) and _number(weight) and weight > 0:  # healthy ~1e-3 (see monitor)
            yield f"update_ratio/{name(key)}", update / weight

    for key, norm in _dict(row.get("norms")).items():  # see tracewriter._stats_row
        if isinstance(norm, list) and len(norm) >= 5 and isinstance(key, str):
            for stat, value in zip(("norm_training", "norm_shift", "norm_log_scale", "norm_gain"), norm):
                yield f"{stat}/{name(key)}", value
    for loss, call in _dict(row.get("loss_calls")).items():
        if isinstance(call, list) and len(call) >= 3:
            for stat, value in zip(("loss_input_min", "loss_input_max", "loss_row_sum_dev"), call):
                yield f"{stat}/{loss}", value
    for key, block in _dict(row.get("resid")).items():  # skip, branch, output RMS
        if isinstance(block, list) and len(block) == 3 and isinstance(key, str):
            skip, branch, _ = block
            if _number(skip) and _number(branch) and skip > 0:  # healthy 0.1-3 (see families/residual.py)
                yield f"resid_branch_ratio/{name(key)}", branch / skip
    for key, attn in _dict(row.get("attn")).items():  # largest logit, entropy mean and median
        if isinstance(attn, list) and len(attn) == 3 and isinstance(key, str):
            yield f"attn_max_logit/{name(key)}", attn[0]
            yield f"attn_entropy/{name(key)}", attn[2]


def _event_line(ev: Any) -> str:
    metrics = ", ".join(f"{k}={v:.4g}" for k, v in ev.metrics.items() if v is not None)
    where = ev.module or ev.site or "-"
    return f"- `{ev.type}` **{where}**: {ev.from_} → {ev.to}" + (f" ({metrics})" if metrics else "")


def events_text(events: Iterable[Any]) -> dict[int, str]:
    """Markdown per step: TensorBoard's text plugin keeps one value per tag and step, so a step's events
    share one entry."""
    by_step: dict[int, list[str]] = defaultdict(list)
    for ev in events:
        by_step[ev.step].append(_event_line(ev))
    return {step: "\n".join(lines) for step, lines in sorted(by_step.items())}


def verdict_text(report: Report) -> str:
    """The explain verdict as Markdown: status, then each hypothesis with where, when and what to change."""
    lines = [f"**status: {report.status}**, {report.steps_observed} steps observed", ""]
    lines += [f"*warning: {w}*" for w in report.warnings]
    for h in report.hypotheses:
        where = f" at **{h.origin.module}**" if h.origin.module else ""
        cause = f", caused by `{h.caused_by.value}`" + (f" ({h.because})" if h.because else "") if h.caused_by else ""
        lines.append(
            f"{h.rank}. `{h.kind.value}` ({h.confidence:.2f}){where}, step {h.origin.step}{cause}: {h.summary}"
        )
        lines += [f"    - try: {s}" for s in h.suggestions]
    if not report.hypotheses:
        lines.append("No problem found.")
    return "\n".join(lines)


def _tensorboard() -> SimpleNamespace:
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.text.summary_v2 import text_pb
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as e:
        raise NeuraldbgError(
            f"neuraldbg: export --tensorboard needs the tensorboard package ({e}); install it with: {INSTALL_HINT}"
        ) from None
    return SimpleNamespace(
        Event=event_pb2.Event, Summary=summary_pb2.Summary, text_pb=text_pb, EventFileWriter=EventFileWriter
    )


def _summaries(
    tb: SimpleNamespace, stats: list[dict[str, Any]], events: Iterable[Any], report: Report
) -> Iterator[tuple[int, Any]]:
    """(step, Summary): a stats row's scalars, a step's events, the verdict at the last step."""
    roots = {k.split("|", 1)[0] for r in stats for k in (r.get("grads") or {}) if isinstance(k, str)}
    for row in stats:
        values = [
            tb.Summary.Value(tag=tag, simple_value=float(v))  # NaN/inf too: TensorBoard marks them
            for tag, v in _scalars(row, len(roots) > 1)
            if _number(v)
        ]
        if values:
            yield row["step"], tb.Summary(value=values)
    for step, text in events_text(events).items():
        yield step, tb.text_pb("neuraldbg/events", text)
    yield max(report.steps_observed - 1, 0), tb.text_pb("neuraldbg/verdict", verdict_text(report))


def write_tensorboard(out_dir: Path, stats: list[dict[str, Any]], events: Iterable[Any], report: Report) -> Path:
    """Write one event file (*.neuraldbg) into out_dir: scalars from the stats rows, the events per step (tag
    neuraldbg/events) and the verdict at the last step (tag neuraldbg/verdict). Returns out_dir."""
    tb = _tensorboard()
    now = time.time()
    try:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        writer = tb.EventFileWriter(str(out_dir), filename_suffix=".neuraldbg")
        try:
            for step, summary in _summaries(tb, stats, events, report):
                if 0 <= step < MAX_STEP:  # a hand-edited trace may hold any integer
                    writer.add_event(tb.Event(wall_time=now, step=step, summary=summary))
        finally:
            writer.close()
    except OSError as e:
        raise NeuraldbgError(f"neuraldbg: cannot write to {out_dir}: {e.strerror or e}") from None
    return Path(out_dir)

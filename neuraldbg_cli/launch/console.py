"""The console: live one-line-per-event output on stderr while the script trains, and the verdict printed
at the end (with the exit status it gives)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from neuraldbg_cli.config import Settings
from neuraldbg_cli.errors import ExitCode
from neuraldbg_cli.launch.distributed import RankInfo, claim_first
from neuraldbg_cli.trace.events import SemanticEvent
from neuraldbg_cli.trace.job import read_job

MAX_LIVE_LINES = 40


# What a live line shows, by (what is judged, state): the numbers that moved. Each entry is a metric name
# or a tuple of alternatives (the first one present is shown); a ratio the monitor did not send is derived
# from its two parts (DERIVED). A transition back to a healthy state shows what the left state showed.
LIVE_METRICS: dict[tuple[str, str], tuple[Any, ...]] = {
    ("activation", "anomalous"): ("std", "std_ratio"),
    ("activation", "dead"): ("dead_frac",),
    ("activation", "saturated"): ("sat_frac",),
    ("activation", "non_finite"): (("nonfinite", "sum"),),
    ("data", "extreme_scale"): ("mean", "std", "max"),
    ("data", "shifted"): ("mean", "std", "std_ratio"),
    ("data", "non_finite"): (("nonfinite", "sum"),),
    ("gradient", "vanishing"): ("rms", "ratio_to_max"),
    ("gradient", "exploding"): ("rms", "rms_ratio"),
    ("gradient", "non_finite"): ("rms",),
    ("gradient", "absent"): (),
    ("loss", "diverging"): ("loss", ("rise_factor", "rise")),
    ("loss", "oscillating"): ("loss", "low", "high"),
    ("loss", "plateau"): ("loss", "start", "improvement"),
    ("loss", "non_finite"): ("loss",),
    ("weights", "unchanged"): ("weight_norm",),
    ("weights", "oversized"): ("update_ratio",),
    ("weights", "collapsing"): ("weight_norm", "weight_ratio"),
}
DERIVED = {
    "std_ratio": ("std", "baseline_std"),
    "rms_ratio": ("rms", "baseline_rms"),
    "rise": ("recent", "best"),
    "weight_ratio": ("weight_norm", "first_weight_norm"),
}
HEALTHY_STATES = {"normal", "healthy", "updating"}
FALLBACK_METRICS = ("rms", "dead_frac", "sat_frac", "loss", "std", "weight_norm")


def _site_group(site: str | None) -> str:
    if site in ("input", "target"):
        return "data"
    if site in ("gradient", "weights", "loss"):
        return site
    return "activation"  # a layer's output or an activation


def _metric(metrics: dict[str, Any], name: str) -> float | None:
    v = metrics.get(name)
    if v is None and name in DERIVED:
        num, den = (metrics.get(k) for k in DERIVED[name])
        if isinstance(num, (int, float)) and isinstance(den, (int, float)) and den:
            v = num / den
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _moved(ev: SemanticEvent) -> list[str]:
    """The metrics that moved (LIVE_METRICS for the event's site and state), as "name=value"."""
    group = _site_group(ev.site)
    state = ev.from_ if ev.to in HEALTHY_STATES and ev.from_ not in HEALTHY_STATES else ev.to
    wanted = LIVE_METRICS.get((group, state))
    shown: list[str] = []
    for entry in wanted if wanted is not None else (FALLBACK_METRICS,):
        for name in entry if isinstance(entry, tuple) else (entry,):
            v = _metric(ev.metrics, name)
            if v is not None:
                shown.append(f"{name}={v:.3g}")
                break
    return shown


def live_line(ev: SemanticEvent) -> str:
    """One event as a console line, with the metrics that moved (see LIVE_METRICS); missing ones are
    left out, and an event the table does not know shows the first of the usual metrics present."""
    shown = _moved(ev)
    where = ev.module or ev.site or ev.root or "-"
    detail = f" ({', '.join(shown)})" if shown else ""
    return f"neuraldbg: step {ev.step} {where}: {ev.type} {ev.from_} -> {ev.to}{detail}"


def group_line(evs: list[SemanticEvent]) -> str:
    """Several modules' same transition at one step, as one line: the first and last module, how many, and the
    first metric that moved at both ends ("layers.0 … layers.12 (13 modules) ... (rms=3.24e-16 … 1.07e-06)")."""
    first, last = evs[0], evs[-1]
    a, b = (_moved(first) or [""])[0], (_moved(last) or [""])[0]
    name, _, end = b.partition("=")
    detail = f" ({a} … {end})" if a and name == a.partition("=")[0] else f" ({a})" if a else ""
    where = f"{first.module or first.site or '-'} … {last.module or last.site or '-'} ({len(evs)} modules)"
    return f"neuraldbg: step {first.step} {where}: {first.type} {first.from_} -> {first.to}{detail}"


class Console:
    """Live one-line-per-event output on stderr; dimmed only on a terminal, and never with NO_COLOR set. In a
    torchrun job rank 0 is the console: another rank prints nothing, except the job's first problem of its own
    (a NaN/Inf, or bad data: what one rank's shard can do alone) when no rank saw one before (one line,
    `[rank N]` in front)."""

    def __init__(self, quiet: bool, info: RankInfo | None = None, run_dir: Path | None = None) -> None:
        self.quiet = quiet
        self.tty = sys.stderr.isatty() and not os.environ.get("NO_COLOR")
        self.shown = 0
        self.info, self.run_dir = info, run_dir
        self.first: bool | None = None  # whether this rank saw the job's first problem (None: none yet)
        self.group: tuple[tuple[Any, ...], list[SemanticEvent]] | None = None  # a step's events held back

    def event(self, ev: SemanticEvent) -> None:
        """A monitor event. Events of one step that make the same transition (a gradient vanishing in 13 layers at
        once) are printed as one line when the step's events end (flush), or when another kind of event comes."""
        if self.quiet or ev.type == "run_summary":
            return
        if (
            self.info is not None
            and self.first is None
            and self.run_dir
            and (ev.to == "non_finite" or ev.site in ("input", "target") and ev.to not in HEALTHY_STATES)
        ):
            self.first = claim_first(self.run_dir)
            if self.first and self.info.rank != 0:
                self._print(self.info.prefix + live_line(ev))
        if self.info is not None and self.info.rank != 0:
            return
        key = (ev.step, ev.type, ev.from_, ev.to, _site_group(ev.site))
        if self.group and self.group[0] != key:
            self.flush()
        if not self.group:
            self.group = (key, [])
        self.group[1].append(ev)

    def flush(self) -> None:
        """Print the events held back (one line for a step's same transition in several modules)."""
        if not self.group:
            return
        evs, self.group = self.group[1], None
        self.shown += 1
        if self.shown > MAX_LIVE_LINES:
            if self.shown == MAX_LIVE_LINES + 1:
                self._print("neuraldbg: … more events in the trace")
            return
        self._print(live_line(evs[0]) if len(evs) == 1 else group_line(evs))

    def _print(self, line: str) -> None:
        if self.tty:
            line = f"\033[2m{line}\033[0m"
        print(line, file=sys.stderr, flush=True)


def verdict(run_dir: Path, settings: Settings, code: int) -> int:
    """Print the verdict of a finished run (every rank of a job) and return the exit status: the script's
    own when it failed, 3 when a --fail-on kind is present, else 0."""
    from neuraldbg_cli.reason import reasoner

    try:
        report = reasoner.explain_job(read_job([run_dir]), settings.min_confidence)
    except Exception as e:  # noqa: BLE001
        print(f"neuraldbg: could not explain the run: {e}", file=sys.stderr)
        return code
    for line in reasoner.verdict_lines(report, settings.min_confidence):  # also with --quiet (live lines only)
        print(line, file=sys.stderr)
    print(f"neuraldbg: trace in {run_dir} (neuraldbg explain {run_dir})", file=sys.stderr)
    if code != 0:
        return code
    if settings.fail_on and reasoner.failing_kinds(report, settings.fail_on, settings.min_confidence):
        return int(ExitCode.FAIL_ON)
    return 0

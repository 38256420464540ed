"""The stages wired together while the script runs: the probe's step records go to the monitor and to
stats.jsonl (and, under --stop-on, to the reasoner), the monitor's events to events.jsonl and the console, the
models the probe found to model.json. A part that fails is warned about once and switched off: the training
goes on. The Session (session) owns the run around it: run directory, meta.json, the probes installed and
the script executed, the verdict and exit status."""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import sys
import time
from pathlib import Path
from typing import Any

from neuraldbg_cli.config import Settings
from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.launch.console import Console
from neuraldbg_cli.launch.distributed import RankInfo
from neuraldbg_cli.reason.monitor import Monitor
from neuraldbg_cli.trace.events import META_SCHEMA, SemanticEvent, StepRecord
from neuraldbg_cli.trace.job import RunData
from neuraldbg_cli.trace.writer import RunWriter, StatsThinner


class StageWiring:
    """probe -> monitor -> trace writer (+ live console); `probe` is set once it is built (Session.run)."""

    def __init__(self, settings: Settings, run_dir: Path, info: RankInfo | None, bind: bool = True) -> None:
        self.settings, self.run_dir = settings, run_dir
        self.t0 = time.perf_counter()
        self.info, self.rank = info, info.rank if info is not None else None
        self.offset = 0  # a restarted rank numbers its steps on from the attempts before it
        if bind:
            self._bind(info)
        self.monitor = Monitor(settings.thresholds, self._on_event)
        self.meta: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.off: set[str] = set()  # parts switched off after an internal error
        self.probe: Any = None
        self.seen: list[SemanticEvent] = []  # --stop-on judges the events so far (few: transitions only)
        self.model_doc: dict[str, Any] = {}
        self.stopped: dict[str, Any] | None = None  # --stop-on: where and why the run was ended
        self._judged = -1

    def _bind(self, info: RankInfo | None) -> None:
        """The files this process writes, and its place in a job: at start, or (a child process of the script,
        children.py) once it trains and knows its rank."""
        self.info = info
        self.rank = info.rank if info is not None else None
        try:
            self.writer = RunWriter(self.run_dir, self.rank, append=info is not None and info.attempt > 0)
        except FileExistsError:
            raise NeuraldbgError(f"neuraldbg: {self.run_dir} already holds rank {self.rank} of this job") from None
        self.thinner = StatsThinner(t0=self.t0 if info is not None else None)
        self.console = Console(self.settings.quiet, info, self.run_dir)

    def _on_event(self, ev: SemanticEvent) -> None:
        if self.settings.stop_on:
            self.seen.append(ev)
        if "events.jsonl" not in self.off:
            try:
                self.writer.event(ev.to_json_dict())
            except Exception as e:  # noqa: BLE001 - disk full etc.: warn once, stop writing it, keep training
                self._warn_once("events.jsonl", e)
        self.console.event(ev)

    def _on_steps(self, records: list[StepRecord]) -> None:
        if self.offset:
            records = [dataclasses.replace(r, step=r.step + self.offset) for r in records]
        if "monitor" not in self.off:
            try:
                for rec in records:
                    self.monitor.observe(rec)
            except Exception as e:  # noqa: BLE001
                self._warn_once("monitor", e)
        self.console.flush()  # (this batch of steps' events: a line per step and transition)
        if "stats.jsonl" not in self.off:
            try:
                self.writer.stats(self.thinner.rows(records))
            except Exception as e:  # noqa: BLE001
                self._warn_once("stats.jsonl", e)
        if self.settings.stop_on and self.stopped is None and "stop-on" not in self.off and records:
            try:
                self._judge(records[-1].step)
            except Exception as e:  # noqa: BLE001
                self._warn_once("stop-on", e)

    def _judge(self, step: int) -> None:
        """--stop-on: the reasoner on the events so far (also those the monitor still holds for ordering),
        whenever they changed; a listed kind at --min-confidence ends the run after this optimizer step."""
        from neuraldbg_cli.reason import reasoner

        events = self.seen + self.monitor.pending()
        if len(events) == self._judged:
            return
        self._judged = len(events)
        run = RunData(dir=self.run_dir, meta=self.meta, events=list(events), models=self.model_doc)
        report = reasoner.explain(run, self.settings.min_confidence)
        found = reasoner.failing_kinds(report, self.settings.stop_on, self.settings.min_confidence)
        if found:
            self.stopped = {"step": step, "kinds": found}
            self.probe.stop_requested = True
            prefix = self.info.prefix if self.info is not None and self.info.rank != 0 else ""
            print(
                f"{prefix}neuraldbg: stopping the run after step {step}: {', '.join(found)} confirmed (--stop-on)",
                file=sys.stderr,
                flush=True,
            )

    def _on_models(self) -> None:
        try:
            models = self.probe.models()
            self.monitor.set_models(models)
            self.model_doc = _model_doc(models, self.probe.optimizer_info())
            self.writer.write_json("model.json", self.model_doc)
        except Exception as e:  # noqa: BLE001
            self._warn_once("model description", e)

    def _warn_once(self, part: str, err: BaseException) -> None:
        if part in self.off:
            return
        self.off.add(part)
        prefix = self.info.prefix if self.info is not None and self.info.rank != 0 else ""
        msg = f"{prefix}neuraldbg: internal error in {part} ({type(err).__name__}: {err}); continuing without it"
        self.warnings.append(msg)
        print(msg, file=sys.stderr, flush=True)

    def _close(self) -> None:
        """The script ended: the stages drained in order (the probe's last step, the stats rows held back,
        model.json with the learning rates since, the monitor's last events)."""
        try:
            self.probe.close()
        except Exception as e:  # noqa: BLE001
            self._warn_once("probe shutdown", e)
        if "stats.jsonl" not in self.off:
            try:
                self.writer.stats(self.thinner.finish())
            except Exception as e:  # noqa: BLE001
                self._warn_once("stats.jsonl", e)
        try:  # model.json again: the learning rates recorded since it was last written (optimizers.record_lr)
            if self.model_doc.get("optimizers"):
                self.model_doc = _model_doc(self.probe.models(), self.probe.optimizer_info())
                self.writer.write_json("model.json", self.model_doc)
        except Exception as e:  # noqa: BLE001
            self._warn_once("model description", e)
        try:
            self.monitor.finish()
        except Exception as e:  # noqa: BLE001
            self._warn_once("monitor", e)
        self.console.flush()


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def base_meta(settings: Settings, argv: list[str], script: str, **fields: Any) -> dict[str, Any]:
    """meta.json's fields every observed process writes (a script's session, a child process, an observe()
    block): versions, what ran and where, when it started, with which settings; `fields` add to them."""
    import platform

    import torch

    from neuraldbg_cli import __version__

    return {
        "schema": META_SCHEMA,
        "neuraldbg": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "argv": list(argv),
        "script": script,
        "cwd": os.getcwd(),
        "executable": sys.executable,
        "start": now(),
        "pid": os.getpid(),
        "settings": settings.model_dump(mode="json"),
        **fields,
    }


def _model_doc(models: list[Any], optimizers: Any) -> dict[str, Any]:
    """model.json: each root model's modules and forward order, and the run's optimizers."""
    return {
        "models": [
            {
                "name": m.name,
                "class": m.cls,
                "n_modules": m.n_modules,
                "n_params": m.n_params,
                "order": m.order,
                "modules": {n: vars(i) for n, i in m.modules.items()},
                **({"wrappers": m.wrappers} if m.wrappers else {}),
                **({"facts": m.facts} if m.facts else {}),
            }
            for m in models
        ],
        "optimizers": optimizers,
    }

"""neuraldbg inside a Python process (a notebook, a trainer, a long-lived job), with `neuraldbg run`'s promises:
`observe()` installs the same probes around a block of code (a context manager, or a decorator), writes the
same run directory, and on leaving it removes every hook, drops its references to the models and prints the
verdict. A failure inside neuraldbg is one warning; the training's own exceptions pass through unchanged (a
KeyboardInterrupt closes the trace first).

    import neuraldbg
    with neuraldbg.observe(run_dir="runs/exp1") as obs:
        train(model, loader)
    obs.explain()          # the verdict (the contract's JSON as a typed Report)"""

from __future__ import annotations

import functools
import html
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from neuraldbg_cli.config import Settings
from neuraldbg_cli.errors import NeuraldbgError, StopTraining
from neuraldbg_cli.launch import children
from neuraldbg_cli.launch.session import prepare_run_dir
from neuraldbg_cli.launch.wiring import StageWiring, base_meta, now
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.trace.events import Report
from neuraldbg_cli.trace.writer import point_latest


def _kinds(value: str | list[str] | tuple[str, ...] | None) -> str | None:
    return value if value is None or isinstance(value, str) else ",".join(value)


class Observation(StageWiring):
    """One observed block of training. `report` (and `explain()`) once it has ended; `exit_code` as `neuraldbg
    run` would give (3 when a `fail_on` kind was found); `stopped` when `stop_on` ended it."""

    active: ClassVar[Observation | None] = None  # one at a time per process: hooks are global

    def __init__(
        self,
        run_dir: str | os.PathLike[str] | None = None,
        fail_on: str | list[str] | None = None,
        stop_on: str | list[str] | None = None,
        every: int | None = None,
        quiet: bool | None = None,
        min_confidence: float | None = None,
        name: str | None = None,
        stop_by_flag: bool = False,
    ) -> None:
        self.kwargs = {k: v for k, v in locals().items() if k not in ("self", "__class__") and v is not None}
        settings = Settings.resolve(
            {
                "run_dir": None if run_dir is None else str(run_dir),
                "fail_on": _kinds(fail_on),
                "stop_on": _kinds(stop_on),
                "every": every,
                "quiet": quiet,
                "min_confidence": min_confidence,
            }
        )
        self.name = name or _caller_stem()
        super().__init__(settings, Path("."), None, bind=False)  # the run directory is made on entering
        self.stop_by_flag = stop_by_flag  # a trainer's callback stops through its own flag, not an exception
        self.report: Report | None = None
        self.exit_code: int | None = None
        self.entered = False
        self.pid = os.getpid()
        self.argv, self.path = list(sys.argv), None  # what its training children record as their script
        self.kids = HookSet()

    # ------------------------------------------------------------------ the block

    def __enter__(self) -> Observation:
        if self.entered:
            raise NeuraldbgError("neuraldbg: an observation runs once; call neuraldbg.observe() again for another")
        if Observation.active is not None or children.observed_here():
            raise NeuraldbgError(
                "neuraldbg: observe() blocks cannot be nested, nor used inside `neuraldbg run` (which observes the "
                "whole script already)"
            )

        from neuraldbg_cli.probe.hooks import Probe

        self.entered = True
        self.run_dir = prepare_run_dir(self.settings, self.name)
        self._bind(None)
        Observation.active = self
        self.meta = base_meta(self.settings, sys.argv, self.name, mode="api", status="running", world_size=1)
        self._write_meta()
        self.probe = Probe(self._on_steps, self._on_models, every=self.settings.every)
        try:
            self.probe.install()
        except Exception as e:  # noqa: BLE001 - then the block runs unobserved, rather than not at all
            self.probe.hooks.remove()
            self._warn_once("probe installation", e)
        self.kids = children.arm(self)  # child processes that train inside the block write into its run
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        stopped_here = isinstance(exc, StopTraining) and self.stopped is not None
        code = (
            0
            if exc is None or stopped_here
            else 130
            if isinstance(exc, KeyboardInterrupt)
            else exc.code
            if isinstance(exc, SystemExit) and isinstance(exc.code, int)
            else 1
        )
        try:
            self._end(code)
        finally:
            Observation.active = None
            self.probe = None  # the models, optimizers and tensors it saw are the user's again
        return stopped_here  # --stop-on's own exception ends the block, not the notebook or the program

    def _end(self, code: int) -> None:
        from neuraldbg_cli.launch.console import verdict
        from neuraldbg_cli.reason import reasoner
        from neuraldbg_cli.trace.job import read_job

        self.kids.remove()
        self._close()
        children.collect(self)
        status = "stopped" if self.stopped is not None else "finished" if code == 0 else "failed"
        if self.stopped is not None:
            self.meta.update(stopped_at=self.stopped["step"], stopped_by=self.stopped["kinds"])
        self._write_meta(
            end=now(),
            wall_s=round(time.perf_counter() - self.t0, 3),
            exit_status=code,
            status=status,
            steps_observed=self.monitor.steps_seen,
            faults=(self.probe.faults if self.probe is not None else []) + self.warnings,
        )
        self.writer.close()
        if self.settings.run_dir is None:
            point_latest(self.run_dir)
        self.exit_code = verdict(self.run_dir, self.settings, code)
        try:
            self.report = reasoner.explain_job(read_job([self.run_dir]), self.settings.min_confidence)
        except NeuraldbgError as e:
            self._warn_once("explain", e)

    def _write_meta(self, **fields: Any) -> None:
        self.meta.update(fields)
        try:
            self.writer.write_json("meta.json", self.meta)
        except Exception as e:  # noqa: BLE001
            self._warn_once("meta.json", e)

    def _judge(self, step: int) -> None:
        super()._judge(step)
        if self.stop_by_flag and self.stopped is not None:
            self.probe.stop_requested = False  # the trainer's callback reads `stop_wanted` and stops it itself

    @property
    def stop_wanted(self) -> bool:
        """A `stop_on` kind was confirmed: the training should end after this step."""
        return self.stopped is not None

    # ------------------------------------------------------------------ the verdict

    def explain(self) -> Report:
        """The verdict: of the ended block (as printed), or of what has been recorded so far inside it."""
        if self.report is not None:
            return self.report
        if not self.entered:
            raise NeuraldbgError("neuraldbg: nothing observed yet; use the observation as `with ... as obs:`")
        from neuraldbg_cli.reason import reasoner
        from neuraldbg_cli.trace.job import RunData

        run = RunData(
            dir=self.run_dir, meta=self.meta, events=self.seen + self.monitor.pending(), models=self.model_doc
        )
        return reasoner.explain(run, self.settings.min_confidence)

    def html(self) -> str:
        """The report page of `neuraldbg report` (self-contained HTML: the hypotheses, figures, evidence)."""
        from neuraldbg_cli.render import html as pages
        from neuraldbg_cli.trace.job import read_run, read_stats

        run = read_run(self.run_dir)
        return pages.render_page(self.explain(), read_stats(self.run_dir), run.events, run.models)

    def _repr_html_(self) -> str:
        """Jupyter shows the verdict inline: the report page in a frame of its own (its styles stay its own)."""
        if self.report is None:
            return f"<pre>neuraldbg: observing into {html.escape(str(self.run_dir))} …</pre>"
        page = html.escape(self.html(), quote=True)
        return f'<iframe srcdoc="{page}" style="width:100%;height:720px;border:1px solid #ddd"></iframe>'

    def __repr__(self) -> str:
        if self.report is None:
            return f"<neuraldbg observation of {self.name}: not ended>"
        from neuraldbg_cli.reason import reasoner

        return "\n".join(reasoner.verdict_lines(self.report, self.settings.min_confidence))

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`@observe(...)`: each call of the function is observed on its own (a new observation each time)."""
        return _decorate(fn, self.kwargs)


def observe(fn: Callable[..., Any] | None = None, **kwargs: Any) -> Any:
    """`with observe(...) as obs:`, `@observe` or `@observe(...)`: the block or each call is observed."""
    if fn is not None and callable(fn):
        return _decorate(fn, kwargs)
    return Observation(**kwargs)


def _decorate(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def observed(*args: Any, **kw: Any) -> Any:
        with Observation(**{"name": getattr(fn, "__name__", None), **kwargs}):
            return fn(*args, **kw)

    return observed


def _caller_stem() -> str:
    """A name for the run directory: the script or notebook that called observe()."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path:
        return Path(path).stem
    return "notebook" if "ipykernel" in sys.modules else "observe"

"""Runs SCRIPT / -m MODULE exactly like python would, with the probes installed, and wires the stages:
probes -> monitor -> trace writer (+ live console), then reasoner -> verdict and exit status."""

from __future__ import annotations

import builtins
import datetime as dt
import importlib.machinery
import importlib.util
import io
import marshal
import math
import os
import pkgutil
import platform
import runpy
import signal
import sys
import time
import traceback
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from neuraldbg_cli import __version__
from neuraldbg_cli.config import Settings
from neuraldbg_cli.distributed import (
    JOB_FILE,
    LAUNCHED,
    RankInfo,
    claim_first,
    is_launcher,
    job_start,
    launcher_argv,
    parse_launch,
    rank_info,
    settings_env,
    shared_run_dir,
)
from neuraldbg_cli.errors import ExitCode, NeuraldbgError
from neuraldbg_cli.events import META_SCHEMA, ActStats, SemanticEvent, StepRecord
from neuraldbg_cli.monitor import Monitor
from neuraldbg_cli.trace import EVENTS, META, RunData, RunWriter, point_latest, rank_file, read_job

if TYPE_CHECKING:  # types only
    from importlib.abc import InspectLoader

MAX_LIVE_LINES = 40


class _Terminated(SystemExit):
    """SIGTERM turned into an exit so the trace and meta.json are closed properly (status 143)."""


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def resolve_target(args: list[str]) -> tuple[str, Path | None, list[str]]:
    """('script'|'module', path, argv for the script). Raises NeuraldbgError for a missing target."""
    if not args:
        raise NeuraldbgError("neuraldbg: missing SCRIPT; usage: neuraldbg run [OPTIONS] SCRIPT [ARGS...] or -m MODULE")
    if args[0] == "-m":
        if len(args) < 2:
            raise NeuraldbgError("neuraldbg: -m needs a module name, e.g. neuraldbg run -m mypkg.train")
        name = args[1]
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError) as e:
            raise NeuraldbgError(f"neuraldbg: cannot find module {name!r}: {e}") from None
        if spec is None:
            raise NeuraldbgError(f"neuraldbg: no module named {name!r} (is it on PYTHONPATH / installed?)")
        return "module", None, [name, *args[2:]]
    path = Path(args[0])
    if not path.exists():
        raise NeuraldbgError(f"neuraldbg: script {args[0]} not found")
    if path.is_dir() and not (path / "__main__.py").exists():
        raise NeuraldbgError(f"neuraldbg: {args[0]} is a directory without __main__.py")
    return "script", path, list(args)


def default_run_dir(stem: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{stamp}-{stem}"
    path, k = base, 1
    while path.exists():
        k += 1
        path = Path(f"{base}-{k}")
    return path


def prepare_run_dir(settings: Settings, stem: str, info: RankInfo | None = None) -> Path:
    """The run directory, made and checked writable. A rank of a torchrun job shares its job's directory
    (distributed.shared_run_dir) and refuses one that already holds its rank's trace."""
    explicit = settings.run_dir is not None
    if settings.run_dir is not None:
        run_dir = Path(settings.run_dir)
    elif info is not None:
        run_dir = Path("runs") / f"{job_start():%Y%m%d-%H%M%S}-{stem}"
    else:
        run_dir = default_run_dir(stem)
    if run_dir.exists() and not run_dir.is_dir():
        raise NeuraldbgError(f"neuraldbg: --run-dir {run_dir} exists and is not a directory")
    if info is None and ((run_dir / EVENTS).exists() or (run_dir / JOB_FILE).exists()):
        raise NeuraldbgError(f"neuraldbg: {run_dir} already holds a run; choose another --run-dir or remove it")
    try:
        if info is not None:
            run_dir = shared_run_dir(run_dir, info, explicit)
            if (run_dir / rank_file(EVENTS, info.rank)).exists():
                raise NeuraldbgError(f"neuraldbg: {run_dir} already holds rank {info.rank} of this job")
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_file = run_dir / f".write-test.{os.getpid()}"
        probe_file.write_bytes(b"")
        probe_file.unlink()
    except OSError as e:
        raise NeuraldbgError(f"neuraldbg: cannot write run directory {run_dir}: {e.strerror or e}") from None
    return run_dir


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


def live_line(ev: SemanticEvent) -> str:
    """One event as a console line, with the metrics that moved (see LIVE_METRICS); missing ones are
    left out, and an event the table does not know shows the first of the usual metrics present."""
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
    where = ev.module or ev.site or ev.root or "-"
    detail = f" ({', '.join(shown)})" if shown else ""
    return f"neuraldbg: step {ev.step} {where}: {ev.type} {ev.from_} -> {ev.to}{detail}"


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

    def event(self, ev: SemanticEvent) -> None:
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
        self.shown += 1
        if self.shown > MAX_LIVE_LINES:
            if self.shown == MAX_LIVE_LINES + 1:
                self._print("neuraldbg: … more events in the trace")
            return
        self._print(live_line(ev))

    def _print(self, line: str) -> None:
        if self.tty:
            line = f"\033[2m{line}\033[0m"
        print(line, file=sys.stderr, flush=True)


def _stats_row(rec: StepRecord, t0: float | None = None) -> dict[str, Any]:
    """One step's statistics. With `t0` (a rank of a distributed job) also when the step closed (seconds
    after t0) and, on sampled steps, each module's weight checksums: `explain` compares ranks with them."""
    row: dict[str, Any] = {"step": rec.step, "loss": rec.loss}
    if t0 is not None and rec.time is not None:
        row["t"] = round(rec.time - t0, 4)
    if len(rec.losses) > 1:  # several models trained by their own optimizers: each one's loss
        row["losses"] = dict(rec.losses)
    if rec.sampled:
        row["acts"] = {
            "|".join(k): [s.mean, s.std, s.min, s.max, s.zero_frac, s.dead_frac, s.sat01, s.sat11, s.nonfinite]
            for k, s in rec.acts.items()
            if isinstance(s, ActStats)
        }
        row["grads"] = {"|".join(k): [g.norm, g.weight_norm] for k, g in rec.grads.items()}
        updates = {"|".join(k): g.update_norm for k, g in rec.grads.items() if g.update_norm is not None}
        if updates:  # the change one optimizer step made to each module's weights (L2)
            row["updates"] = updates
        if t0 is not None:
            row["sums"] = {"|".join(k): [int(v) for v in g.checksum] for k, g in rec.grads.items() if g.checksum}
    return row


STATS_EVERY_STEP = 1000  # stats.jsonl holds every step's row for this many steps, then a thinned sample


class StatsThinner:
    """Keeps stats.jsonl bounded on long runs (events are never thinned: the monitor sees every step).
    Every step's row for the first `full` steps; after that only sampled steps' rows, each at least
    step/`density` steps after the previous one, so the file grows with log(steps): a million steps write
    about full + density*ln(steps/full) rows (~1,700). A thinned row's "loss" is the mean of the finite
    losses since the previous row and "loss_steps" how many steps that covers; a row is also written for
    the last step seen, so plots reach the end of the run."""

    def __init__(self, full: int = STATS_EVERY_STEP, density: int = 100, t0: float | None = None) -> None:
        self.full, self.density, self.t0 = full, density, t0
        self.next = full
        self.total, self.finite, self.steps = 0.0, 0, 0
        self.last: StepRecord | None = None  # newest record after `full` not yet written

    def rows(self, records: list[StepRecord]) -> list[dict[str, Any]]:
        out = []
        for rec in records:
            if rec.step < self.full:
                out.append(_stats_row(rec, self.t0))
                continue
            self.steps += 1
            if rec.loss is not None and math.isfinite(rec.loss):
                self.total += rec.loss
                self.finite += 1
            self.last = rec
            if rec.sampled and rec.step >= self.next:
                out.append(self._take(rec))
                self.next = rec.step + max(1, rec.step // self.density)
        return out

    def finish(self) -> list[dict[str, Any]]:
        return [self._take(self.last)] if self.last is not None else []

    def _take(self, rec: StepRecord) -> dict[str, Any]:
        row = _stats_row(rec, self.t0)
        row["loss"] = self.total / self.finite if self.finite else rec.loss
        row["loss_steps"] = self.steps
        self.total, self.finite, self.steps, self.last = 0.0, 0, 0, None
        return row


RANK_WAIT_S = 30.0  # rank 0 waits at most this long, at its end, for the other ranks' traces to close
ABSENT_WAIT_S = 3.0  # a rank with no trace here by then writes elsewhere (another node's run directory)


def wait_for_ranks(run_dir: Path, world_size: int, timeout: float = RANK_WAIT_S, absent: float = ABSENT_WAIT_S) -> None:
    """Rank 0 speaks for the job, so its verdict should see every rank's complete trace: poll the others'
    meta.rank<N>.json until each has ended (a rank still running when the time is up is explained as it is)."""
    import orjson

    start = time.monotonic()
    while True:
        waited = time.monotonic() - start
        waiting = False
        for r in range(1, world_size):
            try:
                doc = orjson.loads((run_dir / rank_file(META, r)).read_bytes())
            except FileNotFoundError:
                waiting = waiting or waited < absent
                continue
            except (OSError, orjson.JSONDecodeError):
                continue
            waiting = waiting or (isinstance(doc, dict) and doc.get("status") == "running")
        if not waiting or waited > timeout:
            return
        time.sleep(0.05)


class Session:
    """One observed run of a user script (or, for `neuraldbg run torchrun ...`, of a job of ranks)."""

    def __init__(self, settings: Settings, args: list[str]) -> None:
        self.settings = settings
        self.mode, self.path, self.argv = resolve_target(args)
        self.info = rank_info()  # a rank of a torchrun job, or None
        stem = self.path.stem if self.path is not None else self.argv[0].rsplit(".", 1)[-1]
        self.run_dir = prepare_run_dir(settings, stem, self.info)
        self.rank = self.info.rank if self.info is not None else None
        self.t0 = time.perf_counter()
        try:
            self.writer = RunWriter(self.run_dir, self.rank)
        except FileExistsError:
            raise NeuraldbgError(f"neuraldbg: {self.run_dir} already holds rank {self.rank} of this job") from None
        self.thinner = StatsThinner(t0=self.t0 if self.info is not None else None)
        self.console = Console(settings.quiet, self.info, self.run_dir)
        self.monitor = Monitor(settings.thresholds, self._on_event)
        self.meta: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.off: set[str] = set()  # parts switched off after an internal error
        self.probe: Any = None
        self.pid = os.getpid()
        self.seen: list[SemanticEvent] = []  # --stop-on judges the events so far (few: transitions only)
        self.model_doc: dict[str, Any] = {}
        self.stopped: dict[str, Any] | None = None  # --stop-on: where and why the run was ended
        self._judged = -1

    # -- wiring

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
        if "monitor" not in self.off:
            try:
                for rec in records:
                    self.monitor.observe(rec)
            except Exception as e:  # noqa: BLE001
                self._warn_once("monitor", e)
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
        from neuraldbg_cli import reasoner

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
            self.model_doc = {
                "models": [
                    {
                        "name": m.name,
                        "class": m.cls,
                        "n_modules": m.n_modules,
                        "n_params": m.n_params,
                        "order": m.order,
                        "modules": {n: vars(i) for n, i in m.modules.items()},
                        **({"wrappers": m.wrappers} if m.wrappers else {}),
                    }
                    for m in models
                ],
                "optimizers": self.probe.optimizer_info(),
            }
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

    # -- the run

    def write_meta(self, **extra: Any) -> None:
        """meta.json; in a distributed run each rank's own meta.rank<N>.json, and rank 0's also as meta.json."""
        self.meta.update(extra)
        try:
            self.writer.write_json("meta.json", self.meta)
            if self.rank == 0:
                self.writer.write_json("meta.json", self.meta, per_rank=False)
        except Exception as e:  # noqa: BLE001
            self._warn_once("meta.json", e)

    def run(self) -> int:
        import torch  # deferred: `explain` must not pay for torch

        from neuraldbg_cli.probes import Probe

        self.meta = {
            "schema": META_SCHEMA,
            "neuraldbg": __version__,
            "torch": torch.__version__,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "argv": self.argv,
            "mode": self.mode,
            "script": str(self.path or self.argv[0]),
            "cwd": os.getcwd(),
            "start": _now(),
            "status": "running",
            "world_size": self.info.world_size if self.info is not None else 1,
            "pid": os.getpid(),
            "settings": self.settings.model_dump(mode="json"),
        }
        if self.info is not None:
            self.meta.update(
                rank=self.info.rank, local_rank=self.info.local_rank, host=platform.node(), job=self.info.job
            )
        self.write_meta()
        self.probe = Probe(self._on_steps, self._on_models, every=self.settings.every)
        t0 = self.t0
        try:
            self.probe.install()
        except Exception as e:  # noqa: BLE001 - then the script runs unobserved, rather than not at all
            self.probe.hooks.remove()
            self._warn_once("probe installation", e)
        previous = _install_sigterm()
        try:
            code = self._execute()
        finally:
            _restore_sigterm(previous)
            if os.getpid() == self.pid:
                self._close()
        if os.getpid() != self.pid:  # a child the script forked, leaving through sys.exit: the run is not its
            return code
        status = "finished" if code == 0 else "failed"
        if self.stopped is not None:  # whatever the script made of the StopTraining it got (Lightning: exit 1)
            code, status = int(ExitCode.FAIL_ON), "stopped"
            self.meta.update(stopped_at=self.stopped["step"], stopped_by=self.stopped["kinds"])
        self.write_meta(
            end=_now(),
            wall_s=round(time.perf_counter() - t0, 3),
            exit_status=code,
            status=status,
            steps_observed=self.monitor.steps_seen,
            faults=self.probe.faults + self.warnings,
        )
        self.writer.close()
        if self.settings.run_dir is None and not self.rank:
            point_latest(self.run_dir)
        if self.rank or os.environ.get(LAUNCHED):  # rank 0 (or the launching neuraldbg) speaks for the job
            return code
        if self.info is not None:
            wait_for_ranks(self.run_dir, self.info.world_size)
        return self._verdict(code)

    def _close(self) -> None:
        try:
            self.probe.close()
        except Exception as e:  # noqa: BLE001
            self._warn_once("probe shutdown", e)
        if "stats.jsonl" not in self.off:
            try:
                self.writer.stats(self.thinner.finish())
            except Exception as e:  # noqa: BLE001
                self._warn_once("stats.jsonl", e)
        try:
            self.monitor.finish()
        except Exception as e:  # noqa: BLE001
            self._warn_once("monitor", e)

    def _execute(self) -> int:
        """Run the target as __main__; return the exit status python would have given."""
        saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
        try:
            if self.mode == "module":
                sys.argv = list(self.argv)
                sys.path[0] = os.getcwd()
                runpy.run_module(self.argv[0], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(self.argv)
                run_script(self.argv[0])
            return 0
        except SystemExit as e:
            return _exit_code(e)
        except KeyboardInterrupt as e:
            _print_user_traceback(e)
            return 130
        except BaseException as e:  # noqa: BLE001 - the script's own exception: report it like python
            _print_user_traceback(e)
            return 1
        finally:
            sys.stdout.flush()
            sys.argv = saved_argv
            if saved_path0 is not None and sys.path:
                sys.path[0] = saved_path0

    def _verdict(self, code: int) -> int:
        return verdict(self.run_dir, self.settings, code)


class JobLauncher:
    """`neuraldbg run torchrun ...` (or `-m torch.distributed.run`): torchrun runs here unobserved (it trains
    nothing) and starts every rank under neuraldbg, all writing to one run directory; then the merged verdict,
    as for a single process."""

    def __init__(self, settings: Settings, argv: list[str]) -> None:
        self.settings, self.argv = settings, argv
        _, module, script, _ = parse_launch(argv)  # the ranks' script names the run directory
        self.run_dir = prepare_run_dir(settings, script.rsplit(".", 1)[-1] if module else Path(script).stem)

    def run(self) -> int:
        from torch.distributed.run import main as torchrun_main

        saved_argv, saved_env = sys.argv, dict(os.environ)
        os.environ.update(settings_env(self.settings.model_dump(mode="json"), self.run_dir))
        try:  # (torchrun handles SIGTERM itself: it stops the ranks, whose traces close as usual)
            sys.argv = launcher_argv(self.argv)
            torchrun_main()
            code = 0
        except SystemExit as e:
            code = _exit_code(e)
        except KeyboardInterrupt:
            code = 130
        except BaseException as e:  # noqa: BLE001 - torchrun's own error (a failed rank): as torchrun prints it
            _print_user_traceback(e)
            code = 1
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(saved_env)
        if self.settings.run_dir is None:
            point_latest(self.run_dir)
        return verdict(self.run_dir, self.settings, code)


def start(settings: Settings, args: list[str]) -> Any:
    """What `neuraldbg run ARGS` runs: a Session, or a JobLauncher for torchrun itself."""
    mode, path, argv = resolve_target(args)
    return JobLauncher(settings, argv) if is_launcher(mode, path, argv) else Session(settings, args)


def verdict(run_dir: Path, settings: Settings, code: int) -> int:
    """Print the verdict of a finished run (every rank of a job) and return the exit status: the script's
    own when it failed, 3 when a --fail-on kind is present, else 0."""
    from neuraldbg_cli import reasoner

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


def _python_abspath(typed: str) -> str:
    """The script path as python 3.9+ keeps it: joined to the working directory, not normalised
    (`python ./x.py` gives `/cwd/./x.py`)."""
    if typed in ("", "."):
        return os.getcwd()
    return typed if os.path.isabs(typed) else os.path.join(os.getcwd(), typed)


def run_script(typed: str) -> None:
    """Run a script file, or a directory / zip file with a __main__.py, as `python TYPED` does: `__file__`
    and the code's file name (tracebacks) absolute, so a script that changes directory still finds files
    next to it; sys.argv[0] left as typed; sys.path[0] the script's real directory, or the directory / zip
    itself. (runpy.run_path keeps a relative `__file__` and sets sys.argv[0] to the path it is given.)"""
    path = _python_abspath(typed)
    importer = pkgutil.get_importer(path)
    if importer is None:  # a plain source or .pyc file
        sys.path[0] = os.path.dirname(os.path.realpath(typed))
        code, loader = _file_code(path)
        _exec_as_main(code, __file__=path, __cached__=None, __loader__=loader)
        return
    sys.path[0] = path
    spec = importer.find_spec("__main__")
    if spec is None or spec.loader is None:
        print(f"{sys.executable}: can't find '__main__' module in {path!r}", file=sys.stderr)
        raise SystemExit(1)
    loader = cast("InspectLoader", spec.loader)  # a path entry's (source, .pyc, zip): each has get_code
    _exec_as_main(
        loader.get_code("__main__"),
        __file__=spec.origin,
        __cached__=spec.cached,
        __loader__=spec.loader,
        __spec__=spec,
        __package__=spec.parent,
    )


def _file_code(path: str) -> tuple[Any, Any]:
    """The code of a script (compiled without this module's `from __future__` flags) and its loader."""
    with io.open_code(path) as f:
        data = f.read()
    if data[:4] == importlib.util.MAGIC_NUMBER:
        return marshal.loads(data[16:]), importlib.machinery.SourcelessFileLoader("__main__", path)
    return compile(data, path, "exec", dont_inherit=True), importlib.machinery.SourceFileLoader("__main__", path)


def _exec_as_main(code: Any, **dunders: Any) -> None:
    """Execute `code` as the module `__main__` (so pickling a class the script defines works), then put
    neuraldbg's own `__main__` back, as runpy does."""
    main = types.ModuleType("__main__")
    main.__dict__.update(dunders, __builtins__=builtins)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved


def _exit_code(e: SystemExit) -> int:
    if isinstance(e, _Terminated):
        return 143
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    print(code, file=sys.stderr)
    return 1


def _print_user_traceback(e: BaseException) -> None:
    """Like python's own report: through sys.excepthook, without neuraldbg's and runpy's frames. Our frames
    in the middle (the backward wrapper) are left out too; a Ctrl-C that lands inside one of our hooks
    ends the traceback where the script's code called into them."""
    tb = e.__traceback__
    ours = (str(Path(__file__).parent), runpy.__file__, "<frozen runpy>")
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(ours):
        tb = tb.tb_next
    kept = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(ours[0] + os.sep):
            kept.append(tb)
        elif isinstance(e, KeyboardInterrupt):
            break
        tb = tb.tb_next
    for frame, after in zip(kept, [*kept[1:], None]):
        frame.tb_next = after
    tb = kept[0] if kept else None
    e.__traceback__ = tb
    sys.stdout.flush()
    try:
        sys.excepthook(type(e), e, tb)
    except Exception:  # noqa: BLE001
        traceback.print_exception(type(e), e, tb)
    sys.stderr.flush()


def _install_sigterm() -> Any:
    def handler(signum: int, frame: Any) -> None:
        raise _Terminated(143)

    try:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main thread
        pass
    return None


def _restore_sigterm(previous: Any) -> None:
    if previous is not None:
        try:
            signal.signal(signal.SIGTERM, previous)
        except (ValueError, OSError):
            pass

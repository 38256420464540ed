"""`verify`'s trials as processes: each one `python -m neuraldbg_cli run --quiet --run-dir TRIAL ...` with the
recorded command, cwd and environment, in its own process group (a timeout or Ctrl-C kills the whole group,
and so does the end of the trial: nothing it started is left running), and what it showed read back from its
run directory."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.reason.fixspec import ENV_FIX, ENV_GUARD, ENV_MAX_STEPS, ENV_OVERLAY_FAILED, ENV_SEED, TRIAL_FILE
from neuraldbg_cli.verify import overlay

OUTPUT = "output.log"  # the trial's stdout and stderr, in its run directory
KILL_GRACE_S = 5.0
# loggers that would write to a shared account or server: off in trials (their local files are redirected anyway)
QUIET_LOGGERS = {"WANDB_MODE": "disabled", "WANDB_DISABLED": "true", "NEPTUNE_MODE": "debug"}


@dataclass
class Command:
    """What `run` recorded: how to start the script again."""

    argv: list[str]
    mode: str
    cwd: str
    env: dict[str, str]
    python: str
    every: int | None = None
    thresholds: dict[str, Any] = field(default_factory=dict)


LATE = 10  # the latest losses a trial's level is the mean of (one batch's loss is noisy)


@dataclass
class Outcome:
    """One trial: `state` ok | crashed | timeout | interrupted | error."""

    name: str
    seed: int | None
    dir: Path
    state: str = "ok"
    exit_status: int | None = None
    steps: int = 0
    loss: float = math.nan  # the last step's loss (NaN: non-finite or none)
    kinds: dict[str, float] = field(default_factory=dict)  # kind -> confidence, at least --min-confidence
    causes: dict[str, str] = field(default_factory=dict)  # kind -> the kind it is likely a consequence of
    late: float = math.nan  # the mean of the latest losses (LATE of them): the level the verdict compares
    fall: float = math.nan  # how fast that level still falls, per step (the LATE losses before it vs it)
    first: float = math.nan  # the mean of the first LATE losses: where the trial started from
    objectives: dict[str, float] = field(default_factory=dict)  # several models with their own losses: each's level
    fix: dict[str, Any] = field(default_factory=dict)  # trial.json's "fix": applied, skipped
    isolation: str = ""  # overlay | guard: how the user's files were kept from the trial (trial.json)
    overlay_failed: str = ""  # why this trial fell back to the guard when an overlay was wanted
    error: str = ""
    wall_s: float = 0.0

    def doc(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "seed": self.seed,
            "dir": str(self.dir),
            "state": self.state,
            "exit_status": self.exit_status,
            "steps": self.steps,
            "loss": self.loss if math.isfinite(self.loss) else None,
            "late_loss": self.late if math.isfinite(self.late) else None,
            **(
                {"objectives": {k: v if math.isfinite(v) else None for k, v in self.objectives.items()}}
                if self.objectives
                else {}
            ),
            "kinds": self.kinds,
            "wall_s": round(self.wall_s, 2),
            "isolation": self.isolation or None,
        }
        if self.overlay_failed:
            out["overlay_failed"] = self.overlay_failed
        if self.causes:
            out["causes"] = self.causes
        if self.error:
            out["error"] = self.error
        return out


def trial_env(cmd: Command, home: Path, fix: str | None, seed: int | None, steps: int) -> dict[str, str]:
    """The recorded environment over verify's own (neuraldbg's variables dropped from both), the loggers off,
    no bytecode written next to the user's modules, and the trial's own variables."""
    env = {k: v for k, v in {**os.environ, **cmd.env}.items() if not k.startswith("NEURALDBG_")}
    env.update(QUIET_LOGGERS, PYTHONDONTWRITEBYTECODE="1", MLFLOW_TRACKING_URI=(home / "mlruns").as_uri())
    env.update({ENV_MAX_STEPS: str(steps), ENV_GUARD: "1"})
    if fix:
        env[ENV_FIX] = fix
    if seed is not None:
        env[ENV_SEED] = str(seed)
    if cmd.every is not None:
        env["NEURALDBG_EVERY"] = str(cmd.every)
    if cmd.thresholds:
        env["NEURALDBG_THRESHOLDS"] = ",".join(f"{k}={v}" for k, v in cmd.thresholds.items())
    return env


def start(
    cmd: Command, out: Outcome, fix: str | None, steps: int, upper: str | None, failed: str = ""
) -> subprocess.Popen[bytes]:
    """Start the trial; with `upper` (a scratch folder), through the overlay launcher; `failed`: why an overlay
    wanted could not be had (the trial records it)."""
    out.dir.mkdir(parents=True, exist_ok=True)
    argv = [cmd.python, "-m", "neuraldbg_cli", "run", "--quiet", "--run-dir", str(out.dir)]
    argv += ["-m", *cmd.argv] if cmd.mode == "module" else cmd.argv
    env = trial_env(cmd, out.dir, fix, out.seed, steps)
    if failed:
        env[ENV_OVERLAY_FAILED] = failed
    if upper:
        root = os.path.realpath(cmd.cwd)
        argv = [cmd.python, "-m", "neuraldbg_cli.verify.overlay", root, upper, os.path.realpath(out.dir), "--", *argv]
    with open(out.dir / OUTPUT, "wb") as log:
        return subprocess.Popen(
            argv,
            cwd=cmd.cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: killed whole
        )


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the trial's process group (the script's finally blocks run), SIGKILL after a grace period
    to whatever is left of it, the trial's own children included."""
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        if wait is not None:
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                pass
    proc.wait()


def run_one(cmd: Command, out: Outcome, fix: str | None, steps: int, timeout: float, isolate: bool) -> Outcome:
    """Run one trial to its end (or its timeout), in an overlay when `isolate` (its scratch folder deleted
    after); KeyboardInterrupt kills it and propagates."""
    t0 = time.monotonic()
    upper = overlay.scratch(os.path.realpath(cmd.cwd)) if isolate else None
    try:
        failed = "" if upper or not isolate else "no scratch folder outside the working directory"
        proc = start(cmd, out, fix, steps, upper, failed)
    except OSError as e:
        out.state, out.error = "error", f"cannot start the trial: {e.strerror or e}"
        if upper:
            overlay.remove(upper)
        return out
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        out.state, out.error = "timeout", f"timed out after {timeout:g} s"
    except KeyboardInterrupt:
        out.state, out.error = "interrupted", "interrupted (Ctrl-C)"
        raise
    finally:
        kill_group(proc)  # also what the script left running behind it
        out.wall_s = time.monotonic() - t0
        out.exit_status = proc.returncode
        if upper:
            overlay.remove(upper)
    return out


def read_outcome(out: Outcome, min_confidence: float) -> Outcome:
    """What the trial showed: its hypotheses at min_confidence, steps, last loss, what its fix did."""
    from neuraldbg_cli.errors import NeuraldbgError
    from neuraldbg_cli.reason import reasoner
    from neuraldbg_cli.trace.job import read_job, read_stats

    try:
        run = read_job([out.dir]).runs[0]
    except NeuraldbgError as e:
        out.state, out.error = out.state if out.state != "ok" else "error", out.error or str(e)
        return out
    report = reasoner.explain(run, min_confidence)
    counted = [h for h in report.hypotheses if h.confidence >= min_confidence]
    out.kinds = {h.kind.value: h.confidence for h in counted}
    out.causes = {h.kind.value: h.caused_by.value for h in counted if h.caused_by is not None}
    out.steps = report.steps_observed
    rows = read_stats(out.dir)
    losses = [float(r["loss"]) if isinstance(r["loss"], (int, float)) else math.nan for r in rows if "loss" in r]
    if losses:
        out.loss = losses[-1]
        out.late = sum(losses[-LATE:]) / len(losses[-LATE:])  # NaN when any of them is
        out.first = sum(losses[:LATE]) / len(losses[:LATE])
        if len(losses) >= 2 * LATE:
            out.fall = (sum(losses[-2 * LATE : -LATE]) / LATE - out.late) / LATE
    out.objectives = objective_levels(rows)
    trial = _trial_doc(out.dir)
    out.fix = trial.get("fix") or {}
    out.isolation = str(trial.get("isolation") or "")
    out.overlay_failed = str(trial.get("overlay_failed") or "")
    if out.state == "ok" and run.meta.get("status") not in ("finished", "stopped"):
        out.state, out.error = "crashed", f"exit status {run.meta.get('exit_status')}: {_last_error(out.dir)}"
    return out


def objective_levels(rows: list[dict[str, Any]]) -> dict[str, float]:
    """A run that trains several models with their own losses (a GAN's pair, actor and critic): the level of each
    one's loss (the mean of its latest LATE values; NaN when one of them is), each judged on its own."""
    series: dict[str, list[float]] = {}
    for r in rows:
        for name, v in (r.get("losses") or {}).items():
            series.setdefault(str(name), []).append(float(v) if isinstance(v, (int, float)) else math.nan)
    if len(series) < 2:
        return {}
    return {name: sum(vs[-LATE:]) / len(vs[-LATE:]) for name, vs in series.items()}


def _trial_doc(run_dir: Path) -> dict[str, Any]:
    try:
        doc = orjson.loads((run_dir / TRIAL_FILE).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _last_error(run_dir: Path) -> str:
    """The last line the script printed that is not neuraldbg's (usually the exception)."""
    try:
        lines = (run_dir / OUTPUT).read_text(errors="replace").splitlines()
    except OSError:
        return "no output"
    mine = ("neuraldbg:", "  ")
    return next((ln.strip() for ln in reversed(lines) if ln.strip() and not ln.startswith(mine)), "no output")[:200]


def python_for(recorded: Any) -> str:
    """The interpreter the run used, if it is still there; else this one."""
    return recorded if isinstance(recorded, str) and os.path.exists(recorded) else sys.executable

"""The observed session: runs SCRIPT / -m MODULE like python would (scriptexec), with the probes installed, and
wires the stages: probes -> monitor -> trace writer (+ live console; see wiring), then reasoner -> verdict and
exit status. Here the run around that wiring: its directory, meta.json, the probes (and a verify trial's fix)
installed before the script runs, and after it its status, the trace closed and the verdict."""

from __future__ import annotations

import datetime as dt
import os
import platform
import time
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.config import Settings
from neuraldbg_cli.errors import ExitCode, NeuraldbgError
from neuraldbg_cli.launch.children import arm, collect
from neuraldbg_cli.launch.console import verdict
from neuraldbg_cli.launch.distributed import JOB_FILE, LAUNCHED, RankInfo, job_start, rank_info, shared_run_dir
from neuraldbg_cli.launch.scriptexec import execute, install_sigterm, resolve_target, restore_sigterm
from neuraldbg_cli.launch.wiring import StageWiring, base_meta, now
from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.trace.events import EVENT_SCHEMA
from neuraldbg_cli.trace.job import last_row_step
from neuraldbg_cli.trace.writer import EVENTS, META, STATS, point_latest, rank_file


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
            if (run_dir / rank_file(EVENTS, info.rank)).exists() and not info.attempt:
                raise NeuraldbgError(f"neuraldbg: {run_dir} already holds rank {info.rank} of this job")
        run_dir.mkdir(parents=True, exist_ok=True)
        probe_file = run_dir / f".write-test.{os.getpid()}"
        probe_file.write_bytes(b"")
        probe_file.unlink()
    except OSError as e:
        raise NeuraldbgError(f"neuraldbg: cannot write run directory {run_dir}: {e.strerror or e}") from None
    return run_dir


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


class Session(StageWiring):
    """One observed run of a user script (or, for `neuraldbg run torchrun ...`, of a job of ranks)."""

    def __init__(self, settings: Settings, args: list[str]) -> None:
        mode, path, argv = resolve_target(args)
        info = rank_info()  # a rank of a torchrun job, or None
        stem = path.stem if path is not None else argv[0].rsplit(".", 1)[-1]
        super().__init__(settings, prepare_run_dir(settings, stem, info), info)
        self.mode, self.path, self.argv = mode, path, argv
        self.pid = os.getpid()

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

        from neuraldbg_cli.probe.hooks import Probe
        from neuraldbg_cli.verify.trial import from_env

        trial = from_env(self.run_dir)  # a verify trial: its variables leave os.environ before it is recorded
        self.meta = base_meta(
            self.settings,
            self.argv,
            str(self.path or self.argv[0]),
            mode=self.mode,
            env=script_env(os.environ),
            status="running",
            world_size=self.info.world_size if self.info is not None else 1,
        )
        if self.info is not None:
            self.meta.update(
                rank=self.info.rank,
                local_rank=self.info.local_rank,
                host=platform.node(),
                job=self.info.job,
                clock0=self.t0,  # the stats rows' times count from here (one clock per host)
            )
        resumed = self._restarted() if self.info is not None and self.info.attempt else None
        self.write_meta()
        if trial is not None:  # before the probe: a fix's step pre-hook (clipping) runs before the probe reads
            trial.install()
        self.probe = Probe(self._on_steps, self._on_models, every=self.settings.every)
        t0 = self.t0
        try:
            self.probe.install()
        except Exception as e:  # noqa: BLE001 - then the script runs unobserved, rather than not at all
            self.probe.hooks.remove()
            self._warn_once("probe installation", e)
        if trial is not None:
            self.probe.pacer.max_steps = trial.max_steps
        kids = self._arm_children()
        self.sigterm_before = previous = install_sigterm()
        try:
            code = execute(self.mode, self.argv)
        finally:
            restore_sigterm(previous)
            if os.getpid() == self.pid:
                kids.remove()
                self._close()
                if trial is not None:
                    trial.close(self.writer.write_json)
        if os.getpid() != self.pid:  # a child the script forked, leaving through sys.exit: the run is not its
            return code
        status = "finished" if code == 0 else "failed"
        if self.stopped is not None:  # whatever the script made of the StopTraining it got (Lightning: exit 1)
            code, status = int(ExitCode.FAIL_ON), "stopped"
            self.meta.update(stopped_at=self.stopped["step"], stopped_by=self.stopped["kinds"])
        elif self.probe.pacer.limit_reached:  # a verify trial's clean end after its steps
            code, status = 0, "stopped"
            self.meta.update(stopped_at=self.probe.step - 1, step_limit=self.probe.pacer.max_steps)
        self._children_ended()
        if resumed is not None:
            resumed.remove()
        self.write_meta(
            end=now(),
            wall_s=round(time.perf_counter() - t0, 3),
            exit_status=code,
            status=status,
            steps_observed=self.offset + self.monitor.steps_seen,
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

    def _restarted(self) -> HookSet:
        """A rank torchrun restarted (--max-restarts): it continues its trace, steps numbered on from the
        attempts before, after a restart event; meta.json keeps each attempt, and whether this one resumed
        from a checkpoint (an optimizer's state loaded)."""
        import torch

        assert self.info is not None
        try:
            before = orjson.loads((self.run_dir / rank_file(META, self.info.rank)).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            before = {}
        before = before if isinstance(before, dict) else {}
        steps = before.get("steps_observed")
        if not isinstance(steps, int):
            steps = (last_row_step(self.run_dir / rank_file(STATS, self.info.rank)) or -1) + 1
        self.offset = steps
        done = {k: before.get(k) for k in ("attempt", "start", "end", "status", "exit_status") if k in before}
        self.meta.update(attempt=self.info.attempt, attempts=[*before.get("attempts", []), {**done, "steps": steps}])
        self.meta["resumed"] = False
        self._on_event_json(
            {
                "type": "restart",
                "step": steps,
                "module": None,
                "from": str(before.get("status", "running")),
                "to": "restarted",
                "metrics": {"attempt": float(self.info.attempt), "steps_before": float(steps)},
                "site": "run",
            }
        )
        hooks = HookSet()
        original = torch.optim.Optimizer.__dict__["load_state_dict"]

        def load_state_dict(opt: Any, *args: Any, **kwargs: Any) -> Any:
            self.meta["resumed"] = True
            return original(opt, *args, **kwargs)

        hooks.patch(torch.optim.Optimizer, "load_state_dict", load_state_dict)
        return hooks

    def _on_event_json(self, doc: dict[str, Any]) -> None:
        try:
            self.writer.event(dict(schema=EVENT_SCHEMA, **doc))
        except Exception as e:  # noqa: BLE001
            self._warn_once("events.jsonl", e)

    def _arm_children(self) -> HookSet:
        """Child processes of the script that train are observed into this run (children.py); not for a rank
        of a torchrun job, whose run is already the job's."""
        if self.info is not None:
            return HookSet()
        return arm(self)

    def _children_ended(self) -> None:
        """Wait for the traces of the children that trained, and name them in meta.json (the job's meta)."""
        if self.info is None:
            collect(self)

    def _verdict(self, code: int) -> int:
        return verdict(self.run_dir, self.settings, code)


_SECRET_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE", "SESSION")


def script_env(env: os._Environ[str] | dict[str, str]) -> dict[str, str]:
    """The script's environment as meta.json records it (`verify` re-runs with it): without variables whose
    names look like secrets (…KEY, …TOKEN, PASSWORD…) and without neuraldbg's own (the settings are recorded)."""
    return {
        k: v
        for k, v in sorted(env.items())
        if not k.startswith("NEURALDBG_") and not any(w in k.upper() for w in _SECRET_WORDS)
    }

"""torchrun jobs: which rank this process is, the run directory all ranks of one job share, and how to start
torchrun so that every rank it spawns runs under neuraldbg. Torch-free and coordination-free: every rank
derives the same answers from what torchrun puts in its environment, and the run directory is claimed with
an exclusive create, so ranks never wait on each other or on the network."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from neuraldbg_cli.errors import NeuraldbgError

JOB_FILE = "job.id"  # who owns a run directory: the job's identity, written once, atomically
LAUNCHERS = ("torch.distributed.run", "torch.distributed.launch")


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    job: str  # identical on every rank and node of one job (and its restarts), different for the next job
    attempt: int = 0  # torchrun's restart count: a restarted rank appends to its trace (--max-restarts)

    @property
    def prefix(self) -> str:
        return f"[rank {self.rank}] "


def rank_info(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """This process's place in a torchrun job (RANK / WORLD_SIZE / ...), None outside one or with one rank."""
    env = os.environ if env is None else env
    try:
        rank, world = int(env["RANK"]), int(env.get("WORLD_SIZE", "1"))
    except (KeyError, ValueError):
        return None
    if world <= 1 or not 0 <= rank < world:
        return None
    # torchrun's rendezvous hands every node the same run id, master address and port (a restart keeps
    # them: its ranks continue the job's traces)
    parts = [env.get(k, "") for k in ("TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")]
    if not any(parts[:3]):  # not torchrun (a hand-set RANK): the launcher process stands for the job
        parts.append(str(os.getppid()))
    job = hashlib.sha1("\0".join(parts).encode()).hexdigest()[:12]
    try:
        local = int(env.get("LOCAL_RANK", rank))
    except ValueError:
        local = rank
    try:
        attempt = max(0, int(env.get("TORCHELASTIC_RESTART_COUNT", "0")))
    except ValueError:
        attempt = 0
    return RankInfo(rank=rank, world_size=world, local_rank=local, job=job, attempt=attempt)


def job_start() -> dt.datetime:
    """When the launcher that spawned this rank started: the same instant for all ranks it spawned (their
    parent), read from /proc; now where /proc cannot tell (not Linux)."""
    try:
        fields = Path(f"/proc/{os.getppid()}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # starttime: clock ticks after boot (field 22 of proc(5))
        boot = next(
            int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime ")
        )
        return dt.datetime.fromtimestamp(boot + ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, StopIteration):
        return dt.datetime.now()


def claim(run_dir: Path, info: RankInfo) -> bool:
    """Make `run_dir` this job's, or find it already is (True); False when another run holds it. Race-free:
    the job file is written whole under a private name and linked into place, which fails if it exists."""
    run_dir.mkdir(parents=True, exist_ok=True)
    mine = run_dir / JOB_FILE
    tmp = run_dir / f".{JOB_FILE}.{os.getpid()}"
    tmp.write_text(info.job)
    try:
        os.link(tmp, mine)
        return True
    except FileExistsError:
        return mine.read_text().strip() == info.job
    finally:
        tmp.unlink(missing_ok=True)


def shared_run_dir(base: Path, info: RankInfo, explicit: bool) -> Path:
    """The directory every rank of the job writes to. An explicit --run-dir is shared by the ranks, and
    refused when another run holds it; the default `runs/<launch time>-<stem>` takes the next free `-k`
    suffix, the same on every rank because each takes the first one that is free or already the job's."""
    if explicit:
        if (base / "events.jsonl").exists() or not claim(base, info):
            raise NeuraldbgError(f"neuraldbg: {base} already holds another run; choose another --run-dir or remove it")
        return base
    for k in range(1, 1000):
        path = base if k == 1 else Path(f"{base}-{k}")
        if not (path / "events.jsonl").exists() and claim(path, info):
            return path
    raise NeuraldbgError(f"neuraldbg: no free run directory next to {base}")


# ---------------------------------------------------------------- launching torchrun under neuraldbg


def is_launcher(mode: str, path: Path | None, argv: list[str]) -> bool:
    """`neuraldbg run -m torch.distributed.run ...` or `neuraldbg run $(which torchrun) ...`."""
    if mode == "module":
        return argv[0] in LAUNCHERS
    return path is not None and path.name == "torchrun" and not path.suffix


def parse_launch(argv: list[str]) -> tuple[list[str], bool, str, list[str]]:
    """torchrun's argv -> (its own options, -m given, the training script or module, the script's args)."""
    from torch.distributed.run import get_args_parser  # deferred: only a launch pays for it

    opts = argv[1:]
    try:
        parsed = get_args_parser().parse_args(opts)
    except SystemExit:
        raise NeuraldbgError(
            "neuraldbg: torchrun could not parse its options (run it without neuraldbg to see why)"
        ) from None
    if parsed.no_python:
        raise NeuraldbgError(
            "neuraldbg: with --no-python, start neuraldbg from torchrun instead: "
            "torchrun [OPTIONS] --no-python neuraldbg run SCRIPT [ARGS]"
        )
    tail = 1 + len(parsed.training_script_args)
    head = [o for o in opts[: len(opts) - tail] if o not in ("-m", "--module")]
    return head, bool(parsed.module), parsed.training_script, list(parsed.training_script_args)


def launcher_argv(argv: list[str]) -> list[str]:
    """torchrun's argv with each rank's command turned into `python -m neuraldbg_cli run SCRIPT ARGS` (through
    torchrun's --no-python), so every rank it spawns is observed; settings_env() tells them the rest."""
    head, module, script, args = parse_launch(argv)
    return [
        "torchrun",
        *head,
        "--no-python",
        sys.executable,
        "-m",
        "neuraldbg_cli",
        "run",
        *(["-m"] if module else []),
        script,
        *args,
    ]


FIRST_FILE = ".first-problem"  # the rank that creates it saw the job's first problem: only it speaks of it


def claim_first(run_dir: Path) -> bool:
    """True for the one rank that reports the job's first problem on the console (an exclusive create)."""
    try:
        os.close(os.open(run_dir / FIRST_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        return True
    except OSError:
        return False


def settings_env(settings: dict, run_dir: Path) -> dict[str, str]:
    """NEURALDBG_* variables that give every rank the launching neuraldbg's resolved settings (they outrank a
    pyproject.toml, as the options did). --fail-on is not passed: the launcher decides on the merged verdict."""
    env = {
        "NEURALDBG_RUN_DIR": str(run_dir),
        "NEURALDBG_EVERY": str(settings["every"]),
        "NEURALDBG_MIN_CONFIDENCE": str(settings["min_confidence"]),
        "NEURALDBG_QUIET": "1" if settings["quiet"] else "0",
        LAUNCHED: "1",
    }
    thresholds = settings.get("thresholds") or {}
    if thresholds:
        env["NEURALDBG_THRESHOLDS"] = ",".join(f"{k}={v}" for k, v in thresholds.items())
    return env


LAUNCHED = "NEURALDBG_LAUNCHED"  # set for ranks a `neuraldbg run torchrun ...` spawned: it prints the verdict

"""Reads a run directory for the reasoner: one process's trace (read_run), or every rank of a torchrun job
(read_job), with meta.json and model.json checked field by field, and the statistics for plots (read_stats).
Unusable input becomes a NeuraldbgError (one line, exit 2); what can be used with a warning is."""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.trace.events import MAX_STEP, META_SCHEMA, SemanticEvent
from neuraldbg_cli.trace.reader import MAX_LINE, iter_lines, read_events, warn
from neuraldbg_cli.trace.writer import EVENTS, META, MODEL, STATS, rank_file

VERIFY = "verify.json"  # written by `neuraldbg verify` (verify.py)

MAX_INT = MAX_STEP + 1  # steps and counts beyond 64 bits are corrupt


@dataclass
class RunData:
    """One process's trace: a single-process run, or one rank of a distributed one (`rank`; its `stats` rows
    are read too, for the comparisons across ranks)."""

    dir: Path
    meta: dict[str, Any]
    events: list[SemanticEvent]
    models: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    rank: int | None = None
    stats: list[dict[str, Any]] = field(default_factory=list)
    verify: dict[str, Any] = field(default_factory=dict)  # verify.json: which fixes `neuraldbg verify` checked


@dataclass
class JobData:
    """What `explain` reads: the runs of one job (one, or one per rank, from one or more run directories)."""

    dirs: list[Path]
    runs: list[RunData]
    meta: dict[str, Any] = field(default_factory=dict)  # the job's meta.json (rank 0's, in a distributed run)
    warnings: list[str] = field(default_factory=list)

    @property
    def distributed(self) -> bool:
        return any(r.rank is not None for r in self.runs)


_RANK_FILE = re.compile(r"^(?:events|meta)\.rank(\d{1,6})\.jsonl?$")


def ranks_in(run_dir: Path) -> list[int]:
    """The ranks whose traces a distributed run directory holds (empty for a single-process run)."""
    try:
        names = os.listdir(run_dir)
    except OSError:
        return []
    return sorted({int(m.group(1)) for m in map(_RANK_FILE.match, names) if m})


def _check_dir(run_dir: Path) -> Path:
    try:
        resolved = run_dir.resolve(strict=True)
    except FileNotFoundError:
        raise NeuraldbgError(f"neuraldbg: run directory {run_dir} does not exist") from None
    except (OSError, RuntimeError) as e:  # symlink loops land here
        raise NeuraldbgError(f"neuraldbg: cannot open run directory {run_dir}: {e}") from None
    if not resolved.is_dir():
        raise NeuraldbgError(f"neuraldbg: {run_dir} is not a directory; pass the run directory that holds events.jsonl")
    if not (resolved / EVENTS).exists() and not (resolved / META).exists() and not ranks_in(resolved):
        raise NeuraldbgError(f"neuraldbg: {run_dir} is not a neuraldbg run directory (no events.jsonl or meta.json)")
    return resolved


def _is_file(path: Path) -> bool:
    """False when missing; a NeuraldbgError when it is not a regular file (a FIFO or /dev/zero would hang or
    never end, a symlink loop cannot be opened)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        if os.path.lexists(path):
            raise NeuraldbgError(f"neuraldbg: {path} is a broken symlink") from None
        return False
    except OSError as e:
        raise NeuraldbgError(f"neuraldbg: cannot open {path}: {e.strerror or e}") from None
    except RuntimeError as e:  # has no strerror
        raise NeuraldbgError(f"neuraldbg: cannot open {path}: {e}") from None
    if not stat.S_ISREG(mode):
        raise NeuraldbgError(f"neuraldbg: {path} is not a regular file")
    return True


def _read_json_file(path: Path, what: str) -> dict[str, Any]:
    if not _is_file(path):
        return {}
    try:
        if path.stat().st_size > 64 * MAX_LINE:
            raise NeuraldbgError(f"neuraldbg: {path} is too large to be a {what}")
        data = orjson.loads(path.read_bytes())
    except NeuraldbgError:
        raise
    except (OSError, orjson.JSONDecodeError) as e:
        raise NeuraldbgError(f"neuraldbg: {path} is not valid JSON ({e}); the run directory is corrupt") from None
    if not isinstance(data, dict):
        raise NeuraldbgError(f"neuraldbg: {path} is not a JSON object; the run directory is corrupt")
    return data


def read_run(run_dir: Path) -> RunData:
    """Load a run directory for the reasoner; raises NeuraldbgError on unusable input. Of a distributed run,
    the lowest rank's trace (read_job reads them all)."""
    resolved = _check_dir(Path(run_dir))
    ranks = ranks_in(resolved)
    run = _read_one(resolved, Path(run_dir), ranks[0] if ranks else None)
    if ranks:
        run.warnings.insert(
            0,
            f"a distributed run of ranks {_span(ranks)}: this shows rank {ranks[0]}; "
            "`neuraldbg explain` merges all ranks",
        )
    return run


def read_job(run_dirs: list[Path], stats_limit: int = 20_000) -> JobData:
    """The runs of one job from one or more run directories: a single-process run, or every rank found (a
    torchrun job's ranks share a directory, or each node has its own: `explain run_node0 run_node1`)."""
    runs: list[RunData] = []
    meta: dict[str, Any] = {}
    warnings: list[str] = []
    for run_dir in run_dirs:
        resolved = _check_dir(Path(run_dir))
        ranks = ranks_in(resolved)
        if not ranks:
            if len(run_dirs) > 1:
                raise NeuraldbgError(
                    f"neuraldbg: {run_dir} is a single-process run; only the directories of one "
                    "torchrun job can be explained together"
                )
            return JobData(dirs=[Path(run_dir)], runs=[_read_one(resolved, Path(run_dir), None)])
        if not meta and _is_file(resolved / META):
            meta = _read_json_file(resolved / META, "meta.json")
        for rank in ranks:
            if any(r.rank == rank for r in runs):
                warn(warnings, f"rank {rank} is in more than one run directory; read the one in {runs[0].dir}")
                continue
            run = _read_one(resolved, Path(run_dir), rank)
            run.stats = read_stats(resolved, stats_limit, rank)
            runs.append(run)
    runs.sort(key=lambda r: r.rank or 0)
    jobs = {r.meta.get("job") for r in runs} - {None}
    if len(jobs) > 1:
        raise NeuraldbgError("neuraldbg: these run directories hold ranks of different jobs; explain one job at a time")
    sizes: set[int] = {r.meta["world_size"] for r in runs if isinstance(r.meta.get("world_size"), int)}
    if len(sizes) > 1:
        raise NeuraldbgError(
            f"neuraldbg: these run directories hold ranks of jobs of different sizes ({', '.join(map(str, sorted(sizes)))} "
            "ranks); explain one job at a time"
        )
    return JobData(dirs=[Path(d) for d in run_dirs], runs=runs, meta=meta, warnings=warnings)


def _span(ranks: list[int]) -> str:
    return (
        f"{ranks[0]}-{ranks[-1]}"
        if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1))
        else ", ".join(map(str, ranks))
    )


def _read_one(resolved: Path, run_dir: Path, rank: int | None) -> RunData:
    """One process's trace: meta, events and model of a single-process run, or of one rank."""
    meta_name, events_name = rank_file(META, rank), rank_file(EVENTS, rank)
    meta = _read_json_file(resolved / meta_name, meta_name)
    schema = meta.get("schema")
    if schema is not None and schema != META_SCHEMA:
        raise NeuraldbgError(
            f"neuraldbg: {run_dir}/{meta_name} has schema {str(schema)[:60]!r}; this neuraldbg "
            f"reads {META_SCHEMA}; upgrade neuraldbg"
        )
    warnings: list[str] = []
    if not meta:
        warnings.append(f"{meta_name} is missing or empty (the run was killed as it started?)")
    meta = _drop_mistyped(meta, META_FIELDS, meta_name, warnings)
    events_path = resolved / events_name
    if _is_file(events_path):
        try:
            events = read_events(events_path, warnings)
        except OSError as e:
            raise NeuraldbgError(f"neuraldbg: cannot read {events_path}: {e}") from None
    else:
        events = []
        warnings.append(f"{events_name} is missing; nothing was observed")
    try:
        models = _read_json_file(resolved / rank_file(MODEL, rank), rank_file(MODEL, rank))
    except NeuraldbgError as e:
        models = {}
        warnings.append(str(e).removeprefix("neuraldbg: "))
    models = _clean_models(models, warnings)
    code = meta.get("exit_status")
    who = "the script" if rank is None else f"rank {rank}'s script"
    if meta.get("status") == "stopped" and "step_limit" in meta:
        warnings.append(f"{who} was ended after {meta.get('step_limit')} steps (a `neuraldbg verify` trial)")
    elif meta.get("status") == "stopped":
        warnings.append(
            f"{who.replace('the script', 'the run')} was stopped by --stop-on after step "
            f"{meta.get('stopped_at')}; this explains what was observed up to then"
        )
    elif meta.get("status") == "terminated" and isinstance(meta.get("child"), dict):
        pass  # a child process its parent ended (a Pool's workers, once their tasks are done): its normal end
    elif isinstance(code, int) and code != 0:
        how = {130: "was interrupted (Ctrl-C)", 143: "was terminated (SIGTERM)"}.get(code, "failed")
        warnings.append(f"{who} {how}, exit status {code}; this explains what was observed up to then")
    elif meta and "exit_status" not in meta and "steps_observed" not in meta:
        last = last_row_step(resolved / rank_file(STATS, rank))  # killed: how far it got is in the last row
        if last is not None:
            meta["steps_observed"] = last + 1
    warnings += _restarts(meta, who)
    verified: dict[str, Any] = {}
    if rank is None and _is_file(resolved / VERIFY):
        try:
            verified = _read_json_file(resolved / VERIFY, VERIFY)
        except NeuraldbgError as e:
            warnings.append(str(e).removeprefix("neuraldbg: "))
    return RunData(dir=run_dir, meta=meta, events=events, models=models, warnings=warnings, rank=rank, verify=verified)


def _restarts(meta: dict[str, Any], who: str) -> list[str]:
    """What a torchrun restart (--max-restarts) did to this trace: said once per restart."""
    attempts = meta.get("attempts")
    if not isinstance(attempts, list) or not attempts:
        return []
    last = attempts[-1] if isinstance(attempts[-1], dict) else {}
    how = (
        "it resumed from a checkpoint (its optimizer state was loaded)"
        if meta.get("resumed")
        else "it trained again from the start (no optimizer state was loaded); steps count on across attempts"
    )
    return [
        f"{who} was restarted by torchrun after {last.get('steps', '?')} steps "
        f"({len(attempts)} restart{'s' if len(attempts) > 1 else ''}): {how}"
    ]


# What the reasoner reads from meta.json and model.json, with the JSON type each must have: a field of
# another type (a hand-edited or corrupt file) is dropped with a warning instead of failing later.
META_FIELDS = {
    "status": str,
    "script": str,
    "start": str,
    "end": str,
    "exit_status": int,
    "steps_observed": int,
    "settings": dict,
    "rank": int,
    "world_size": int,
    "job": str,
    "host": str,
    "stopped_at": int,
}
MODEL_FIELDS = {
    "name": str,
    "class": str,
    "n_modules": int,
    "n_params": int,
    "order": list,
    "modules": dict,
    "wrappers": list,
}
OPTIMIZER_FIELDS = {"type": str, "groups": list, "params": int, "dtypes": list, "step_at": str, "backward_at": str}


def _drop_mistyped(obj: dict[str, Any], fields: dict[str, type], where: str, warnings: list[str]) -> dict[str, Any]:
    out = dict(obj)
    for key, typ in fields.items():
        value = out.get(key)
        if (
            key not in out
            or isinstance(value, typ)
            and not (typ is int and isinstance(value, int) and (isinstance(value, bool) or abs(value) >= MAX_INT))
        ):
            continue
        del out[key]
        warn(warnings, f"{where}: {key!r} has the wrong type; ignored it")
    return out


def _clean_models(doc: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    models, optimizers = doc.get("models", []), doc.get("optimizers", [])
    models = models if isinstance(models, list) else [None]
    optimizers = optimizers if isinstance(optimizers, list) else [None]
    if not all(isinstance(x, dict) for x in [*models, *optimizers]):
        warn(warnings, "model.json is not shaped as neuraldbg writes it; ignored the parts that are not")
    out: dict[str, Any] = {"models": [], "optimizers": []}
    for m in models:
        if isinstance(m, dict):
            m = _drop_mistyped(m, MODEL_FIELDS, "model.json", warnings)
            m["order"] = [n for n in m.get("order", []) if isinstance(n, str)]
            m["modules"] = {
                n: i
                for n, i in m.get("modules", {}).items()
                if isinstance(i, dict) and isinstance(i.get("type", ""), str)
            }
            out["models"].append(m)
    for o in optimizers:
        if isinstance(o, dict):
            o = _drop_mistyped(o, OPTIMIZER_FIELDS, "model.json", warnings)
            o["groups"] = [g for g in o.get("groups", []) if isinstance(g, dict)]
            out["optimizers"].append(o)
    return out


def last_row_step(path: Path) -> int | None:
    """`step` of the last complete row of a JSONL file, read from its tail only (bounded memory)."""
    try:
        if not _is_file(path):
            return None
        with open(path, "rb") as f:
            start = max(0, f.seek(0, os.SEEK_END) - 2 * MAX_LINE)
            f.seek(start)
            lines = f.read().split(b"\n")
    except (OSError, NeuraldbgError):
        return None
    for line in reversed(lines[1 if start else 0 : -1]):  # the first may be cut by the seek, the last unfinished
        try:
            step = orjson.loads(line).get("step")
        except (orjson.JSONDecodeError, AttributeError):
            continue
        if isinstance(step, int) and not isinstance(step, bool) and step >= 0:
            return step
    return None


def read_stats(run_dir: Path, limit: int = 200_000, rank: int | None = None) -> list[dict[str, Any]]:
    """Sampled statistics for plots; tolerant like read_events, bounded by `limit` rows. Of a distributed run,
    `rank`'s (by default the lowest rank's)."""
    if rank is None:
        ranks = ranks_in(Path(run_dir))
        rank = ranks[0] if ranks else None
    path = Path(run_dir) / rank_file(STATS, rank)
    rows: list[dict[str, Any]] = []
    try:
        if not _is_file(path):
            return rows
    except NeuraldbgError:  # plots are left out; explain works without them
        return rows
    for _, line, _ in iter_lines(path):
        if line is None or not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict) and type(obj.get("step")) is int and isinstance(obj.get("grads", {}), dict):
            rows.append(obj)
            if len(rows) >= limit:
                break
    return rows

"""The run directory: meta.json, events.jsonl (append + flush per event), stats.jsonl, model.json.

Writing: every line goes out in one unbuffered write, so a process killed at any moment (even SIGKILL)
leaves only whole lines plus at most one cut-short last line. Reading: tolerant and bounded; bad input
becomes a NeuraldbgError (one line, exit 2) or a warning when the rest is usable. Trace data is only
ever parsed as JSON, never evaluated or unpickled."""

from __future__ import annotations

import gc
import os
import re
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.events import MAX_STEP, META_SCHEMA, SUPPORTED_EVENT_SCHEMAS, SemanticEvent

EVENTS, META, STATS, MODEL = "events.jsonl", "meta.json", "stats.jsonl", "model.json"
MAX_LINE = 1 << 20  # a longer line is not an event: skipped without reading it into memory
MAX_WARNINGS = 20
MAX_INT = MAX_STEP + 1  # steps and counts beyond 64 bits are corrupt
MAX_EVENTS = 200_000  # events are written on transitions only: a real run has far fewer; memory stays bounded


def _dumps(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY, default=str)


def rank_file(name: str, rank: int | None) -> str:
    """A per-rank file of a distributed run: events.jsonl -> events.rank1.jsonl (unchanged without a rank)."""
    if rank is None:
        return name
    stem, dot, ext = name.partition(".")
    return f"{stem}.rank{rank}{dot}{ext}"


class RunWriter:
    """Owns the files of one run (of one rank, in a distributed run: its own files, created exclusively, so
    two processes never write one file). Writes only from the process that created it (not forked children)."""

    def __init__(self, run_dir: Path, rank: int | None = None) -> None:
        self.dir = run_dir
        self.rank = rank
        self.pid = os.getpid()
        run_dir.mkdir(parents=True, exist_ok=True)
        mode = "ab" if rank is None else "xb"
        self._events = open(run_dir / rank_file(EVENTS, rank), mode, buffering=0)
        self._stats = open(run_dir / rank_file(STATS, rank), mode, buffering=0)
        self.n_events = 0

    def event(self, ev: dict[str, Any]) -> None:
        if os.getpid() == self.pid:
            _write_all(self._events, _dumps(ev) + b"\n")
            self.n_events += 1

    def stats(self, rows: list[dict[str, Any]]) -> None:
        if os.getpid() == self.pid and rows:
            _write_all(self._stats, b"".join(_dumps(r) + b"\n" for r in rows))

    def write_json(self, name: str, obj: Any, per_rank: bool = True) -> None:
        """Atomic replace: a reader sees the old or the new file, never half of one. In a distributed run
        the file is this rank's own (model.rank1.json) unless `per_rank` is False (rank 0's meta.json)."""
        if os.getpid() != self.pid:
            return
        if per_rank:
            name = rank_file(name, self.rank)
        tmp = self.dir / f".{name}.tmp"
        tmp.write_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2, default=str))
        os.replace(tmp, self.dir / name)

    def close(self) -> None:
        for f in (self._events, self._stats):
            try:
                f.close()
            except OSError:
                pass


def _write_all(f: Any, data: bytes) -> None:
    """An unbuffered write can be short (a nearly full disk, a signal): finish the line, or raise."""
    view = memoryview(data)
    while view:
        view = view[f.write(view) :]


def point_latest(run_dir: Path) -> None:
    """runs/latest -> the newest run (a symlink; best effort where symlinks are not allowed)."""
    link = run_dir.parent / "latest"
    try:
        if link.is_symlink() or link.exists():
            if not link.is_symlink():
                return
            link.unlink()
        link.symlink_to(run_dir.name)
    except OSError:
        pass


# ---------------------------------------------------------------- reading

_DECODER = msgspec.json.Decoder(SemanticEvent)
_decode, _decode_lines = _DECODER.decode, _DECODER.decode_lines


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


def iter_lines(path: Path) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number, bytes or None when too long, ends with newline). Memory bounded by MAX_LINE."""
    with open(path, "rb") as f:
        n = 0
        while True:
            line = f.readline(MAX_LINE + 1)
            if not line:
                return
            n += 1
            if len(line) > MAX_LINE and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest of the over-long line
                    line = f.readline(MAX_LINE)
                yield n, None, True
                continue
            yield n, line, line.endswith(b"\n")


def iter_blocks(path: Path) -> Iterator[tuple[int, bytes | None, bool]]:
    """The file a block of whole lines at a time, unsplit: (number of the first line, the lines with their
    newlines, True), or (n, None, True) for one line over MAX_LINE, or (n, the line, False) for a cut-short
    last line. Memory bounded by 2 * MAX_LINE."""
    with open(path, "rb") as f:
        n = 1
        head: bytes | None = b""  # the unfinished line so far; None once it is over MAX_LINE
        while block := f.read(MAX_LINE):  # lines inside a block are no longer than MAX_LINE
            end = block.rfind(b"\n") + 1
            if not end:  # the line goes on
                head = head + block if head is not None and len(head) + len(block) <= MAX_LINE else None
                continue
            first = block.find(b"\n")
            if head is None or len(head) + first > MAX_LINE:
                yield n, None, True
                n += 1
                body = block[first + 1 : end]
            else:
                body = head + block[:end] if head else block[:end]
            head = block[end:]
            if body:
                yield n, body, True
                n += body.count(b"\n")
        if head is None:
            yield n, None, True
        elif head:
            yield n, head, False


def split_block(body: bytes | None, complete: bool) -> Sequence[bytes | None]:
    """An iter_blocks block as the lines iter_lines would give, without their newlines (None: over-long)."""
    return [None] if body is None else body[:-1].split(b"\n") if complete else [body]


def read_events(path: Path, warnings: list[str]) -> list[SemanticEvent]:
    """Every valid event of an events.jsonl, in order; bad lines are skipped with a warning. Fast path (see
    BENCHMARKS.md): the file is read a block of whole lines at a time, each block decoded into SemanticEvents in
    one msgspec call (_whole), with the cyclic GC paused meanwhile (it would rescan the new objects again and
    again). A block _whole does not take is read line by line (_lines), which finds and words the bad lines,
    so the result does not depend on where blocks start."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _EventReader(path, warnings).read()
    finally:
        if enabled:
            gc.enable()


class _EventReader:
    def __init__(self, path: Path, warnings: list[str]) -> None:
        self.path, self.warnings = path, warnings
        self.events: list[SemanticEvent] = []
        self.bad = 0
        self.taken = 0  # event lines accepted so far (MAX_EVENTS)

    def read(self) -> list[SemanticEvent]:
        for first, body, complete in iter_blocks(self.path):
            if complete and body is not None and self._whole(body):
                continue
            if not self._lines(first, split_block(body, complete), complete):
                break
        if self.bad > MAX_WARNINGS:
            self.warnings.append(f"{self.bad} lines of {self.path.name} were skipped in all")
        return self.events

    def _whole(self, body: bytes) -> bool:
        """A block of lines that each start with "{" (so none is blank) decoded in one msgspec call, taken when
        it gives as many events as there are lines: then each line held exactly one, as line by line."""
        n = body.count(b"\n")
        if body[:1] != b"{" or body.count(b"\n{") != n - 1 or self.taken + n > MAX_EVENTS:
            return False
        try:
            events = _decode_lines(body)
        except msgspec.DecodeError:
            return False
        if len(events) != n:
            return False
        self.taken += n
        self.events += events
        return True

    def _lines(self, first: int, lines: Sequence[bytes | None], complete: bool) -> bool:
        """Line by line, in line order, each bad line worded in a warning; False when MAX_EVENTS is reached.
        `complete`: False for a cut-short last line."""
        path = self.path.name
        for n, line in enumerate(lines, first):
            if line is None:
                self.bad += 1
                _warn(self.warnings, f"line {n} of {path} is over {MAX_LINE} bytes; skipped")
                continue
            ev: SemanticEvent | None = None
            obj: dict[str, Any] | None = None
            try:
                ev = _decode(line)  # one value per line: a line with two objects or none is an error
            except msgspec.DecodeError:
                obj = self._object(n, line, complete)
                if obj is None:
                    continue
            if self.taken >= MAX_EVENTS:  # an object that is no valid event counts too
                self.warnings.append(f"{path} holds more than {MAX_EVENTS} events; read the first {MAX_EVENTS}")
                return False
            self.taken += 1
            if obj is not None:
                ev = self._validate(n, obj)
            if ev is not None:
                self.events.append(ev)
        return True

    def _object(self, n: int, line: bytes, complete: bool) -> dict[str, Any] | None:
        """The JSON object a line that is no event holds, to say what is wrong with it; None (with a warning
        unless the line is blank) when it holds none. An event schema this neuraldbg does not know stops the
        read."""
        path = self.path.name
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            if not line.strip():
                return None
            if not complete:
                _warn(self.warnings, f"the last line of {path} is cut short (the run was interrupted); ignored it")
            else:
                self.bad += 1
                _warn(self.warnings, f"line {n} of {path} is not valid JSON; skipped it")
            return None
        if type(obj) is not dict:
            self.bad += 1
            _warn(self.warnings, f"line {n} of {path} is not a JSON object; skipped it")
            return None
        _check_schema(self.path, obj.get("schema"))
        return obj

    def _validate(self, n: int, obj: dict[str, Any]) -> SemanticEvent | None:
        """The event, or None with msgspec's reason in a warning (a step beyond 64 bits said as such)."""
        step = obj.get("step")
        if type(step) is int and not 0 <= step <= MAX_STEP:
            reason = f"has step {str(step)[:30]}, out of range"
        else:
            try:
                return msgspec.convert(obj, SemanticEvent)
            except msgspec.ValidationError as e:
                reason = f"is not a valid event ({e})"
        self.bad += 1
        _warn(self.warnings, f"line {n} of {self.path.name} {reason}; skipped it")
        return None


def _check_schema(path: Path, schema: Any) -> None:
    """A schema this neuraldbg does not know, of any JSON type (a list too), stops the read."""
    if schema is not None and not (type(schema) is str and schema in SUPPORTED_EVENT_SCHEMAS):
        _unknown_schema(path, schema)


def _unknown_schema(path: Path, schema: Any) -> None:
    raise NeuraldbgError(
        f"neuraldbg: {path} uses event schema {str(schema)[:60]!r}, which this neuraldbg "
        f"does not know (it reads {', '.join(sorted(SUPPORTED_EVENT_SCHEMAS))}); upgrade neuraldbg"
    )


def _warn(warnings: list[str], msg: str) -> None:
    if len(warnings) < MAX_WARNINGS:
        warnings.append(msg)


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
                _warn(warnings, f"rank {rank} is in more than one run directory; read the one in {runs[0].dir}")
                continue
            run = _read_one(resolved, Path(run_dir), rank)
            run.stats = read_stats(resolved, stats_limit, rank)
            runs.append(run)
    runs.sort(key=lambda r: r.rank or 0)
    jobs = {r.meta.get("job") for r in runs} - {None}
    if len(jobs) > 1:
        raise NeuraldbgError("neuraldbg: these run directories hold ranks of different jobs; explain one job at a time")
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
    if meta.get("status") == "stopped":
        warnings.append(
            f"{who.replace('the script', 'the run')} was stopped by --stop-on after step "
            f"{meta.get('stopped_at')}; this explains what was observed up to then"
        )
    elif isinstance(code, int) and code != 0:
        how = {130: "was interrupted (Ctrl-C)", 143: "was terminated (SIGTERM)"}.get(code, "failed")
        warnings.append(f"{who} {how}, exit status {code}; this explains what was observed up to then")
    elif meta and "exit_status" not in meta and "steps_observed" not in meta:
        last = _last_row_step(resolved / rank_file(STATS, rank))  # killed: how far it got is in the last row
        if last is not None:
            meta["steps_observed"] = last + 1
    return RunData(dir=run_dir, meta=meta, events=events, models=models, warnings=warnings, rank=rank)


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
OPTIMIZER_FIELDS = {"type": str, "groups": list, "params": int}


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
        _warn(warnings, f"{where}: {key!r} has the wrong type; ignored it")
    return out


def _clean_models(doc: dict[str, Any], warnings: list[str]) -> dict[str, Any]:
    models, optimizers = doc.get("models", []), doc.get("optimizers", [])
    models = models if isinstance(models, list) else [None]
    optimizers = optimizers if isinstance(optimizers, list) else [None]
    if not all(isinstance(x, dict) for x in [*models, *optimizers]):
        _warn(warnings, "model.json is not shaped as neuraldbg writes it; ignored the parts that are not")
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


def _last_row_step(path: Path) -> int | None:
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

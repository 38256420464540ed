"""Reads events.jsonl: tolerant and bounded; bad input becomes a NeuraldbgError (one line, exit 2) or a
warning when the rest is usable. Trace data is only ever parsed as JSON, never evaluated or unpickled."""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import orjson

from neuraldbg_cli.errors import NeuraldbgError
from neuraldbg_cli.trace.events import MAX_STEP, SUPPORTED_EVENT_SCHEMAS, SemanticEvent

MAX_LINE = 1 << 20  # a longer line is not an event: skipped without reading it into memory
MAX_WARNINGS = 20
MAX_EVENTS = 200_000  # events are written on transitions only: a real run has far fewer; memory stays bounded

_DECODER = msgspec.json.Decoder(SemanticEvent)
_decode, _decode_lines = _DECODER.decode, _DECODER.decode_lines


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
                warn(self.warnings, f"line {n} of {path} is over {MAX_LINE} bytes; skipped")
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
                warn(self.warnings, f"the last line of {path} is cut short (the run was interrupted); ignored it")
            else:
                self.bad += 1
                warn(self.warnings, f"line {n} of {path} is not valid JSON; skipped it")
            return None
        if type(obj) is not dict:
            self.bad += 1
            warn(self.warnings, f"line {n} of {path} is not a JSON object; skipped it")
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
        warn(self.warnings, f"line {n} of {self.path.name} {reason}; skipped it")
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


def warn(warnings: list[str], msg: str) -> None:
    """Add a warning, up to MAX_WARNINGS of them (the reading of one run directory shares one list)."""
    if len(warnings) < MAX_WARNINGS:
        warnings.append(msg)

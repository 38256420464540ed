"""Writes the run directory: meta.json, events.jsonl (append + flush per event), stats.jsonl, model.json.

Every line goes out in one unbuffered write, so a process killed at any moment (even SIGKILL) leaves only
whole lines plus at most one cut-short last line. stats.jsonl's rows are made here too (StatsThinner: every step's
at first, then a sample that keeps the file bounded)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import orjson

from neuraldbg_cli.trace.events import ActStats, StepRecord

EVENTS, META, STATS, MODEL = "events.jsonl", "meta.json", "stats.jsonl", "model.json"


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

    def __init__(self, run_dir: Path, rank: int | None = None, append: bool = False) -> None:
        self.dir = run_dir
        self.rank = rank
        self.pid = os.getpid()
        run_dir.mkdir(parents=True, exist_ok=True)
        mode = "ab" if rank is None or append else "xb"  # (append: a rank torchrun restarted continues its trace)
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


class _Joined(dict[tuple, str]):
    """A site key's stats.jsonl name ("root|module|site"), joined once per key: a sampled row names every site."""

    def __missing__(self, key: tuple) -> str:
        name = self[key] = "|".join(key)
        return name


_NAMES = _Joined()


def _stats_row(rec: StepRecord, t0: float | None = None) -> dict[str, Any]:
    """One step's statistics. With `t0` (a rank of a distributed job) also when the step closed (seconds
    after t0) and, on sampled steps, each module's weight checksums: `explain` compares ranks with them."""
    row: dict[str, Any] = {"step": rec.step, "loss": rec.loss}
    names = _NAMES
    if t0 is not None and rec.time is not None:
        row["t"] = round(rec.time - t0, 4)
    if len(rec.losses) > 1:  # several models trained by their own optimizers: each one's loss
        row["losses"] = dict(rec.losses)
    if rec.sampled:
        row["acts"] = {
            names[k]: [s.mean, s.std, s.min, s.max, s.zero_frac, s.dead_frac, s.sat01, s.sat11, s.nonfinite]
            for k, s in rec.acts.items()
            if isinstance(s, ActStats)
        }
        row["grads"] = {names[k]: [g.norm, g.weight_norm] for k, g in rec.grads.items()}
        updates = {names[k]: g.update_norm for k, g in rec.grads.items() if g.update_norm is not None}
        if updates:  # the change one optimizer step made to each module's weights (L2)
            row["updates"] = updates
        if rec.norms:  # normalisation layers: mode (1 = train), batch vs running statistics, gain, batch shape
            row["norms"] = {
                names[k]: [
                    float(n.training),
                    n.shift,
                    n.log_scale,
                    n.gain_rms,
                    n.running_finite,
                    n.per_channel,
                    n.batch,
                ]
                for k, n in rec.norms.items()
            }
        if rec.loss_calls:  # how each loss was called: the input's range, its row sums' deviation from 1, shapes
            row["loss_calls"] = {
                name: [c.min, c.max, c.row_sum_dev, list(c.input_shape), _shape(c.target_shape)]
                for name, c in rec.loss_calls.items()
            }
        if rec.resid:  # residual blocks: RMS of the skip (the block's input), of the branch, of the output
            row["resid"] = {names[k]: [r.skip_rms, r.branch_rms, r.out_rms] for k, r in rec.resid.items()}
        if rec.attn:  # attention layers: the largest logit, the rows' normalised entropy (mean, median)
            row["attn"] = {names[k]: [a.max_logit, a.entropy, a.entropy_median] for k, a in rec.attn.items()}
        if t0 is not None:
            row["sums"] = {names[k]: [int(v) for v in g.checksum] for k, g in rec.grads.items() if g.checksum}
    return row


def _shape(shape: tuple[int, ...] | None) -> list[int] | None:
    return None if shape is None else list(shape)


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

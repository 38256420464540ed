"""Per-step buffers of device tensors, and their one trip to the host: a buffer keeps 0-d statistics
on the device with a host-side layout saying what each is; `to_records` reads every pending buffer in one
transfer and turns the values into StepRecords."""
from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, Optional

import torch

from neuraldbg_cli import tensorstats as ts
from neuraldbg_cli.events import ActStats, GradStats, StepRecord


class StepBuffer:
    """Device tensors of one step plus the host-side layout that tells what each value is."""

    __slots__ = ("step", "sampled", "parts", "layout", "checks", "check_keys", "losses", "seen", "covered", "scale",
                 "scaled", "active")

    def __init__(self, step: int, sampled: bool) -> None:
        self.step, self.sampled = step, sampled
        self.parts: list[torch.Tensor] = []  # 0-d (or 1-d) device tensors, in layout order
        self.layout: list[tuple[str, tuple, int, Any]] = []  # (what, key, number of values, extra)
        self.checks: list[torch.Tensor] = []  # the cheap non-finite checks (0-d), most of the parts: kept apart
        self.check_keys: list[tuple] = []
        self.losses: list[torch.Tensor] = []
        self.seen: set[tuple] = set()
        self.covered: set[int] = set()  # params whose gradient was read at an optimizer's pre-step
        self.active: set[str] = set()  # roots whose forward ran in this step
        self.scale: Optional[float] = None
        self.scaled = False  # a GradScaler-scaled backward happened in this step

    def check(self, key: tuple, t: torch.Tensor) -> None:
        self.checks.append(t)
        self.check_keys.append(key)

    def add(self, what: str, key: tuple, t: torch.Tensor) -> None:
        self.parts.append(t)
        self.layout.append((what, key, t.numel(), None))

    def extend(self, what: str, key: Any, ts: list[torch.Tensor], extra: Any = None) -> None:
        """Several 0-d tensors as one entry (no per-entry stack: the transfer stacks everything once)."""
        self.parts.extend(ts)
        self.layout.append((what, key, len(ts), extra))


def to_records(pending: list[StepBuffer], grads_observed: bool) -> list[StepRecord]:
    """One device->host transfer for all pending steps. Without gradient observation (turned off by a
    fault) no step counts as sampled: it would read as "no gradient anywhere"."""
    tensors: list[torch.Tensor] = []
    for buf in pending:
        if buf.losses:
            loss = buf.losses[0] if len(buf.losses) == 1 else torch.stack(buf.losses).mean()
            buf.add("loss", ("", "", "loss"), loss.reshape(()))
        tensors.extend(buf.parts)
        tensors.extend(buf.checks)
    values = ts.host_values(tensors)
    records, i = [], 0
    for buf in pending:
        rec = StepRecord(step=buf.step, sampled=buf.sampled and grads_observed, active=buf.active)
        for what, key, length, extra in buf.layout:
            chunk = values[i:i + length]
            i += length
            _place(rec, what, key, chunk, extra)
        checks = values[i:i + len(buf.checks)]
        i += len(buf.checks)
        if not math.isfinite(sum(checks)):  # a finite check says nothing: only a non-finite one is placed
            for key, v in zip(buf.check_keys, checks):
                if not math.isfinite(v) and not isinstance(rec.acts.get(key), ActStats):
                    rec.acts[key] = v
        records.append(rec)
    return records


def _place(rec: StepRecord, what: str, key: tuple, chunk: list[float], extra: Any = None) -> None:
    if what == "loss":
        rec.loss = chunk[0]
    elif what == "full":
        if not isinstance(rec.acts.get(key), ActStats):
            rec.acts[key] = ts.act_stats(chunk, extra)
    elif what == "grad":  # extra: per-parameter factors from a sample's norm to the whole's (None: exact)
        _accumulate(rec, key, chunk if extra is None else [v * f for v, f in zip(chunk, extra)], "norm")
    elif what == "weight":
        _accumulate(rec, key, chunk, "weight_norm")
    elif what == "checksum":  # per parameter, kept apart: the module changed if any of its parameters did
        for owner, v in zip(key, chunk):
            gs = rec.grads.get(owner)
            if gs is None:
                gs = rec.grads[owner] = GradStats(norm=None, numel=0)
            gs.checksum = (gs.checksum or ()) + (v,)


def _accumulate(rec: StepRecord, owners: tuple, norms: list[float], attr: str) -> None:
    """Per-parameter norms -> per-module norm (sqrt of the sum of squares)."""
    acc: dict[tuple[str, str], float] = defaultdict(float)
    for owner, v in zip(owners, norms):
        acc[owner] += v * v
    for owner, s in acc.items():
        gs = rec.grads.get(owner)
        if gs is None:
            gs = rec.grads[owner] = GradStats(norm=None, numel=0)
        prev = getattr(gs, attr)
        setattr(gs, attr, s ** 0.5 if prev is None else (prev * prev + s) ** 0.5)

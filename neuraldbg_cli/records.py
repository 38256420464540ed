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


# Checks one step holds before repeated keys are folded (StepBuffer.check): a few per module and forward, so
# several dozen forwards of a large model; each is a 0-d device tensor (about 1 KB with its allocation), so
# the cap bounds a step that never closes to a few MB (20k forwards without a step: +105 MB unbounded)
MAX_CHECKS = 8192


class StepBuffer:
    """Device tensors of one step plus the host-side layout that tells what each value is."""

    __slots__ = ("step", "sampled", "parts", "layout", "checks", "check_keys", "losses", "pending", "main", "seen",
                 "covered", "time", "scaled", "active", "_check_at")

    def __init__(self, step: int, sampled: bool) -> None:
        self.step, self.sampled = step, sampled
        self.parts: list[torch.Tensor] = []  # 0-d (or 1-d) device tensors, in layout order
        self.layout: list[tuple[str, tuple, int, Any]] = []  # (what, key, number of values, extra)
        self.checks: list[torch.Tensor] = []  # the cheap non-finite checks (0-d), most of the parts: kept apart
        self.check_keys: list[tuple] = []
        self.losses: dict[str, torch.Tensor] = {}  # loss series (the root model an optimizer trains) -> its sum
        self.pending: Optional[torch.Tensor] = None  # backward losses since the last optimizer step, summed
        self.main: Optional[str] = None  # the series of the optimizer that paces the steps (StepRecord.loss)
        self._check_at: Optional[dict[tuple, int]] = None  # key -> index, once the checks are folded
        self.seen: set[tuple] = set()
        self.covered: set[int] = set()  # params whose gradient was read at an optimizer's pre-step
        self.active: set[str] = set()  # roots whose forward ran in this step
        self.time: Optional[float] = None  # perf_counter() when the step closed
        self.scaled = False  # a GradScaler-scaled backward happened in this step

    def check(self, key: tuple, t: torch.Tensor) -> None:
        """A cheap non-finite check. Past MAX_CHECKS (forwards without a step closing: grad-enabled evaluation,
        a long accumulation) a key already held is folded into its check: `t + 0 * old` is non-finite iff
        either is (0 * inf = nan) and never overflows, one device op and no host sync; new keys still append."""
        if len(self.checks) < MAX_CHECKS:
            self.checks.append(t)
            self.check_keys.append(key)
            return
        if self._check_at is None:
            self._check_at = {}
            for i, k in enumerate(self.check_keys):
                self._check_at.setdefault(k, i)
        i = self._check_at.get(key)
        if i is None:
            self._check_at[key] = len(self.checks)
            self.checks.append(t)
            self.check_keys.append(key)
        else:
            self.checks[i] = torch.add(t, self.checks[i], alpha=0)

    def add_loss(self, t: torch.Tensor) -> None:
        """A backward pass's loss (0-d float): summed with the others until an optimizer step takes them."""
        self.pending = t if self.pending is None else self.pending + t

    def assign_loss(self, series: str, main: bool = False) -> None:
        """The losses since the last optimizer step (summed: micro-batch losses of an accumulation add up to
        the step's loss) belong to `series`; a series stepped twice in one step (while pacing is handed over
        between optimizers) keeps its latest. `main`: the series of the optimizer that leads the steps."""
        if self.pending is not None:
            self.losses[series] = self.pending
            self.pending = None
        if main:
            self.main = series

    def add(self, what: str, key: tuple, t: torch.Tensor) -> None:
        self.parts.append(t)
        self.layout.append((what, key, t.numel(), None))

    def extend(self, what: str, key: Any, ts: list[torch.Tensor], extra: Any = None) -> None:
        """Several 0-d tensors as one entry (no per-entry stack: the transfer stacks everything once)."""
        self.parts.extend(ts)
        self.layout.append((what, key, len(ts), extra))


def update_before(params: list, owners: tuple, sparse: frozenset) -> tuple:
    """Update-to-weight ratio, the usual evidence of a too large learning rate (healthy around 1e-3): the
    norm of the change one optimizer step makes, measured on sampled steps. Before the step: an fp32 copy of
    an even sample of each parameter (tensorstats.sample: whole when small); `update_norms` subtracts it from
    the same sample after the step and scales the norm to the whole tensor as a gradient sample's is. Large
    sparse-gradient parameters (`sparse`: embeddings) are left out: a sample could miss every row a step moved.
    Device ops only: the norms go home with the step's other statistics."""
    keep = [i for i, p in enumerate(params) if (p.numel() <= 2 * ts.SAMPLE or id(p) not in sparse) and ts.holds(p)]
    params = [params[i] for i in keep]
    with torch.no_grad():  # of a sharded parameter, the local shard: the scale below takes it to the whole
        before = [ts.sample(ts.local(p).detach().reshape(-1)).to(torch.float32, copy=True) for p in params]
    return params, tuple(owners[i] for i in keep), before


def update_norms(buf: StepBuffer, params: list, owners: tuple, before: list) -> None:
    """After the optimizer step: see update_before."""
    with torch.no_grad():
        after = [ts.sample(ts.local(p).detach().reshape(-1)).float() for p in params]
        keep = [i for i, (a, b) in enumerate(zip(after, before)) if a.shape == b.shape]
        if not keep:
            return
        norms = torch._foreach_norm(torch._foreach_sub([after[i] for i in keep], [before[i] for i in keep]))
    scale = [math.sqrt(params[i].numel() / before[i].numel()) for i in keep]
    buf.extend("update", tuple(owners[i] for i in keep), list(norms), scale if any(f != 1.0 for f in scale) else None)


def to_records(pending: list[StepBuffer], grads_observed: bool) -> list[StepRecord]:
    """One device->host transfer for all pending steps. Without gradient observation (turned off by a
    fault) no step counts as sampled: it would read as "no gradient anywhere"."""
    tensors: list[torch.Tensor] = []
    for buf in pending:
        for series, loss in buf.losses.items():
            buf.add("loss", series, loss.reshape(()))
        tensors.extend(buf.parts)
        tensors.extend(buf.checks)
    values = ts.host_values(tensors)
    records, i = [], 0
    for buf in pending:
        rec = StepRecord(step=buf.step, sampled=buf.sampled and grads_observed, active=buf.active, time=buf.time)
        for what, key, length, extra in buf.layout:
            chunk = values[i:i + length]
            i += length
            _place(rec, what, key, chunk, extra)
        if rec.losses:  # the pacing optimizer's series, else the first stepped
            rec.loss = rec.losses.get(buf.main, next(iter(rec.losses.values())))  # type: ignore[arg-type]
        checks = values[i:i + len(buf.checks)]
        i += len(buf.checks)
        if not math.isfinite(sum(checks)):  # a finite check says nothing: only a non-finite one is placed
            for key, v in zip(buf.check_keys, checks):
                if not math.isfinite(v):
                    stats = rec.acts.get(key)
                    if isinstance(stats, ActStats):  # a later call of the site (micro-batch, closure) made it
                        stats.nonfinite = max(stats.nonfinite, 1.0)
                    else:
                        rec.acts[key] = v
        records.append(rec)
    return records


def _place(rec: StepRecord, what: str, key: tuple, chunk: list[float], extra: Any = None) -> None:
    if what == "loss":  # key: the series
        rec.losses[key] = chunk[0]
    elif what == "full":
        if not isinstance(rec.acts.get(key), ActStats):
            rec.acts[key] = ts.act_stats(chunk, extra)
    elif what == "grad":  # extra: per-parameter factors from a sample's norm to the whole's (None: exact)
        _accumulate(rec, key, chunk if extra is None else [v * f for v, f in zip(chunk, extra)], "norm")
    elif what == "weight":  # extra: per-parameter factors from a local shard's norm to the whole's (None: exact)
        _accumulate(rec, key, chunk if extra is None else [v * f for v, f in zip(chunk, extra)], "weight_norm")
    elif what == "update":  # extra as for "grad"
        _accumulate(rec, key, chunk if extra is None else [v * f for v, f in zip(chunk, extra)], "update_norm")
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

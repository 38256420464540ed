"""Per-step buffers of device tensors, and their one trip to the host: a buffer keeps 0-d statistics
on the device with a host-side layout saying what each is; `Steps` holds the buffer of the step under way;
the `Outbox` keeps closed steps until `to_records` reads every pending buffer in one transfer and turns the
values into StepRecords.

Why batched: a `.item()` per statistic would make the device wait once per module; one transfer per
sampled step (or every `every` steps) makes it wait once. On the CPU there is no wait to save, and a
step's values are read as it closes (see `_on_cpu`)."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.trace.events import (
    ActStats,
    AttnStats,
    GradStats,
    LoopStats,
    LossCallStats,
    NormStats,
    ResidStats,
    SamplerStats,
    StepRecord,
)

# Checks one step holds before repeated keys are folded (StepBuffer.check): a few per module and forward, so
# several dozen forwards of a large model; each is a 0-d device tensor (about 1 KB with its allocation), so
# the cap bounds a step that never closes to a few MB (20k forwards without a step: +105 MB unbounded)
MAX_CHECKS = 8192
# Elements of CPU outputs a step holds unchecked until the loss of their forward is known (StepBuffer.watch):
# 16 MB of float32, so holding them never costs more memory than that; beyond it they are checked at once
HOLD_LIMIT = 1 << 22


class Slot(NamedTuple):
    """Where some of a buffer's parts go on the host (see `_place`)."""

    what: str  # "loss", "full", "grad", "weight", "update", "update_dot", "checksum", "loss_counts", "manual_kept", "norm", "loss_call", "resid", "attn", "loop", "loopclear", "loopclip", "sampler" or "graphs"
    key: Any  # the series, the site (root, module, site), or the parameters' owners
    length: int  # values in the parts
    extra: Any  # what `_place` needs besides the values (a Layout, norm factors) or None


class StepBuffer:
    """Device tensors of one step plus the host-side layout that tells what each value is."""

    __slots__ = (
        "step",
        "sampled",
        "parts",
        "layout",
        "checks",
        "check_keys",
        "losses",
        "pending",
        "discarded",
        "main",
        "seen",
        "covered",
        "time",
        "scaled",
        "input_grad",
        "active",
        "norm_train",
        "stepped",
        "held",
        "_held_n",
        "unchecked",
        "_check_at",
        "tail",
        "manual",
    )

    def __init__(self, step: int, sampled: bool) -> None:
        self.step, self.sampled = step, sampled
        self.parts: list[torch.Tensor] = []  # 0-d (or 1-d) device tensors, in layout order
        self.layout: list[Slot] = []
        self.checks: list[torch.Tensor] = []  # the cheap non-finite checks (0-d), most of the parts: kept apart
        self.check_keys: list[tuple] = []
        self.losses: dict[str, torch.Tensor] = {}  # loss series (the root model an optimizer trains) -> its sum
        self.pending: torch.Tensor | None = None  # backward losses since the last optimizer step, summed
        self.discarded: torch.Tensor | None = None  # losses whose gradients a zero_grad discarded: see discard_losses
        self.main: str | None = None  # the series of the optimizer that paces the steps (StepRecord.loss)
        self._check_at: dict[tuple, int] | None = None  # key -> index, once the checks are folded
        self.seen: set[tuple] = set()
        self.covered: set[int] = set()  # params whose gradient was read at an optimizer's pre-step
        self.active: set[str] = set()  # roots whose forward ran in this step
        self.time: float | None = None  # perf_counter() when the step closed
        self.scaled = False  # a GradScaler-scaled backward happened in this step
        # a trained model ran on an input that needs a gradient and is no model's output (an adversarial
        # perturbation X + delta): the backward passes of this step may be for the input, not the weights
        self.input_grad = False
        self.stepped: list[tuple] = []  # the owners (root, module) of each optimizer stepped in this step
        self.norm_train: dict[tuple, int] = {}  # norm layers (root, module) -> their training-mode calls this step
        self.held: list[tuple[tuple, torch.Tensor]] = []  # CPU outputs awaiting their loss (see watch)
        self._held_n = 0
        self.unchecked: list[tuple[int, torch.Tensor]] = []  # CPU sites' float32 sums awaiting `check_sums`
        self.tail = False  # the run's last forward passes, after its last step: kept for a NaN, not a step
        self.manual: Any = None  # a sampled backward-counted step's GradReader.before_manual, for its close

    def watch(self, key: tuple, t: torch.Tensor) -> None:
        """A NaN/Inf made at `key` must be seen and named. Off the CPU the check is one reduction queued on the
        device (no wait). On the CPU that reduction is a pass over memory the step pays in full, so the output
        is held instead, and checked only when the loss of its forward pass is not finite (`settle`): a
        non-finite activation reaches the loss, so a finite loss clears them all at the cost of one read. The
        held tensors are checked as they are then (an in-place op after the hook, a ReLU(inplace=True), ran on
        them: it keeps NaN/Inf), at most HOLD_LIMIT elements are held, and what no loss settles is checked when
        the next forward pass begins or the step closes (`settle(False)`)."""
        if not t.is_cpu:
            self.check(key, ts.cheap(t))
            return
        self.held.append((key, t))
        self._held_n += t.numel()
        if self._held_n > HOLD_LIMIT:
            self.settle(False)

    def settle(self, finite: bool) -> None:
        """The loss of the held outputs' forward pass is known: finite drops them unchecked, else each is checked
        (so the first module that made a NaN/Inf is named, as if checked at its call)."""
        self.check_sums()
        held, self.held, self._held_n = self.held, [], 0
        if not finite:
            for key, t in held:
                self.check(key, ts.cheap(t))

    def add_full(self, key: tuple, values: list[torch.Tensor], lay: Any, x: torch.Tensor) -> None:
        """A site's `tensorstats.full(x)` values. On the CPU its float32 sum and sum of squares are checked for
        overflow once for all sites of the step (`check_sums`, when the loss is known or the step closes),
        not with two reads per site; `x` is held until then, as `watch` holds outputs."""
        if x.is_cpu and not lay.flags & ts.EXACT:
            self.unchecked.append((len(self.parts), x))
        self.extend("full", key, values, lay)

    def check_sums(self) -> None:
        """Recompute in float64 the sites' sums that overflowed float32 (see add_full)."""
        if not self.unchecked:
            return
        unchecked, self.unchecked = self.unchecked, []
        parts = self.parts
        for j in ts.overflowed([(parts[i], parts[i + 1]) for i, _ in unchecked]):
            i, x = unchecked[j]
            parts[i], parts[i + 1] = ts.wide_sums(x)

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
            for n, k in enumerate(self.check_keys):
                self._check_at.setdefault(k, n)
        i = self._check_at.get(key)
        if i is None:
            self._check_at[key] = len(self.checks)
            self.checks.append(t)
            self.check_keys.append(key)
        else:
            self.checks[i] = torch.add(t, self.checks[i], alpha=0)

    def add_loss(self, t: torch.Tensor) -> None:
        """A backward pass's loss (0-d float): summed with the others until an optimizer step takes them."""
        if self.discarded is not None:  # t itself, bit for bit, unless a discarded loss was NaN/Inf
            t, self.discarded = t + torch.mul(self.discarded, 0), None
        self.pending = t if self.pending is None else self.pending + t

    def discard_losses(self) -> None:
        """The backward passes since the last optimizer step served no update (StepPacer._drop_discarded): a later
        pass's loss replaces theirs, with no read: `discarded * 0` is NaN iff one was not finite, else a zero it
        absorbs exactly (0 + x == x), so a NaN/Inf among them still shows. With no pass after them before the
        step (gradients zeroed between backward() and step(): a bug), the step's loss is theirs."""
        if self.pending is not None:
            self.discarded = self.pending if self.discarded is None else self.discarded + self.pending
            self.pending = None

    def assign_loss(self, series: str, main: bool = False) -> None:
        """The losses since the last optimizer step (summed: micro-batch losses of an accumulation add up to
        the step's loss) belong to `series`; a series stepped twice in one step (while pacing is handed over
        between optimizers) keeps its latest. `main`: the series of the optimizer that leads the steps."""
        if self.pending is None and self.discarded is not None:  # no pass came after them (see discard_losses)
            self.pending, self.discarded = self.discarded, None
        if self.pending is not None:
            self.losses[series] = self.pending
            self.pending = None
        if main:
            self.main = series

    def add(self, what: str, key: Any, t: torch.Tensor, extra: Any = None) -> None:
        """A 0-d tensor, or a 1-d one holding several values (one per key entry)."""
        self.parts.append(t)
        self.layout.append(Slot(what, key, t.numel(), extra))

    def extend(self, what: str, key: Any, values: list[torch.Tensor], extra: Any = None) -> None:
        """Several 0-d tensors as one entry (no per-entry stack: the transfer stacks everything once)."""
        self.parts.extend(values)
        self.layout.append(Slot(what, key, len(values), extra))


class Steps:
    """The training step under way: its number and its buffer, sampled (full statistics) or not as the
    schedule says. Every probe part adds to the buffer of the step under way."""

    __slots__ = ("step", "buf", "_schedule")

    def __init__(self, schedule: Callable[[int], bool]) -> None:
        self._schedule = schedule
        self.step = 0
        self.buf = StepBuffer(0, schedule(0))

    def next(self) -> None:
        self.step += 1
        self.buf = StepBuffer(self.step, self._schedule(self.step))


def _on_cpu(buf: StepBuffer) -> bool:
    """A step whose values are on the CPU is read at once: that needs no device synchronisation, and small
    tensors kept across steps would pin glibc's heap under the freed activations (measured: +25-60 MB RSS
    on the benchmark models when read every 10 steps)."""
    t = buf.checks[0] if buf.checks else buf.parts[0] if buf.parts else next(iter(buf.losses.values()), None)
    return t is None or t.device.type == "cpu"


class Outbox:
    """Closed steps on their way to `on_steps`: sent at each sampled step (after the first few, every
    `every`-th: so one transfer per `every` steps), when `every` are pending, or at once on the CPU. A change
    of the models' description is announced (`on_models`) before the records that may name the new models."""

    def __init__(
        self, on_steps: Callable[[list[StepRecord]], None], on_models: Callable[[], None], every: int, guard: Guard
    ) -> None:
        self._on_steps, self._on_models, self._every, self._guard = on_steps, on_models, every, guard
        self.pending: list[StepBuffer] = []
        self._models_changed = False

    def models_changed(self) -> None:
        self._models_changed = True

    def put(self, buf: StepBuffer) -> None:
        self.pending.append(buf)
        if buf.sampled or len(self.pending) >= self._every or _on_cpu(buf):
            self.flush()

    def flush(self) -> None:
        """One device->host transfer for all pending steps; then hand the records over."""
        pending, self.pending = self.pending, []
        if not pending:
            return
        try:
            records = to_records(pending, grads_observed="grads" not in self._guard.off)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("transfer", e)
            return
        if self._models_changed:
            self._models_changed = False
            self._on_models()
        self._on_steps(records)


def to_records(pending: list[StepBuffer], grads_observed: bool) -> list[StepRecord]:
    """One device->host transfer for all pending steps. Without gradient observation (turned off by a
    fault) no step counts as sampled: it would read as "no gradient anywhere"."""
    tensors: list[torch.Tensor] = []
    for buf in pending:
        buf.check_sums()
        for series, loss in buf.losses.items():
            buf.add("loss", series, loss.reshape(()))
        tensors.extend(buf.parts)
        tensors.extend(buf.checks)
    values = ts.host_values(tensors)
    records, i = [], 0
    for buf in pending:
        rec = StepRecord(
            step=buf.step, sampled=buf.sampled and grads_observed, active=buf.active, time=buf.time, tail=buf.tail
        )
        for what, key, length, extra in buf.layout:
            chunk = values[i : i + length]
            i += length
            _place(rec, what, key, chunk, extra)
        if buf.stepped:
            rec.stepped = tuple(buf.stepped)  # the cached owner tuples themselves: no per-step set building
        for key, calls in buf.norm_train.items():
            ns = rec.norms.get(key)
            if ns is not None:
                ns.training, ns.calls = True, calls
        if rec.losses:  # the pacing optimizer's series, else the first stepped
            rec.loss = rec.losses.get(buf.main, next(iter(rec.losses.values())))  # type: ignore[arg-type]
        checks = values[i : i + len(buf.checks)]
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


def _place(rec: StepRecord, what: str, key: Any, chunk: list[float], extra: Any) -> None:
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
    elif what == "update_dot":  # extra: per-parameter factors to the whole tensor's (a square's); summed per module
        for owner, v in zip(key, chunk if extra is None else [v * f for v, f in zip(chunk, extra)]):
            gs = rec.grads.get(owner)
            if gs is None:
                gs = rec.grads[owner] = GradStats(norm=None, numel=0)
            gs.update_dot = v if gs.update_dot is None else gs.update_dot + v
    elif what == "norm":  # extra: a normprobe.NormLayout
        _place_norm(rec, key, chunk, extra)
    elif what == "loss_call":  # key: the loss name; extra: a lossprobe.LossLayout
        _place_loss_call(rec, key, chunk, extra)
    elif what == "manual_kept":  # GradReader.kept_grads
        rec.manual_kept = chunk[0]
    elif what == "loss_counts":  # key: the loss name, placed after its call (lossprobe.label_counts)
        call = rec.loss_calls.get(key)
        if call is not None:
            call.counts = tuple(chunk)
    elif what == "resid":  # key: (root, block); extra: a residprobe.ResidLayout
        _place_resid(rec, key, chunk, extra)
    elif what == "attn":  # key: (root, module); extra: an attnprobe.AttnLayout
        _place_attn(rec, key, chunk, extra)
    elif what == "loop":  # key: the optimizer's number; extra: a loopprobe.LoopLayout
        _place_loop(rec, key, chunk, extra)
    elif what == "loopclear":  # key: the optimizer's number; extra: a loopprobe.ClearLayout
        _place_clear(rec, key, chunk, extra)
    elif what == "loopclip":  # key: the optimizer's number; extra: a loopprobe.ClipLayout (host values)
        _loop_stats(rec, key, extra).clipped = extra.after
        rec.loop[key].clip_line = extra.line
    elif what == "sampler":  # key: the sampler's number; extra: a loopprobe.SamplerLayout (host values)
        rec.samplers[key] = SamplerStats(extra.iterations, extra.epoch, extra.epochs, extra.shuffle, extra.line)
    elif what == "graphs":  # extra: graphwatch's GraphStats (host values, replaced, never changed in place)
        rec.graphs = extra
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
        setattr(gs, attr, s**0.5 if prev is None else (prev * prev + s) ** 0.5)


def _place_norm(rec: StepRecord, key: tuple[str, str], chunk: list[float], lay: Any) -> None:
    ns = rec.norms[key] = NormStats(lay.type, lay.training, lay.trainable, lay.momentum, lay.per_channel)
    ns.batch = lay.batch
    rest = iter(chunk)
    if lay.running:
        ns.running_finite, ns.running_initial, ns.shift, ns.log_scale, ns.tracked = (next(rest) for _ in range(5))
    if lay.gain:
        ns.gain_rms = next(rest)


def _place_loss_call(rec: StepRecord, key: str, chunk: list[float], lay: Any) -> None:
    rec.loss_calls[key] = LossCallStats(
        lay.name,
        lay.module,
        lay.input_shape,
        lay.target_shape,
        lay.broadcast_shape,
        lay.reduction,
        lay.dtype,
        lay.classes,
        lay.terms,
        chunk[0],
        chunk[1],
        chunk[2] if lay.row_sums else None,
        lay.source,
        chunk[-2] if lay.one_class else None,
        chunk[-1] if lay.one_class else None,
    )


def _place_resid(rec: StepRecord, key: tuple[str, str], chunk: list[float], lay: Any) -> None:
    skip, branch, out = chunk
    rec.resid[key] = ResidStats(lay.type, lay.norm, lay.found, skip, branch, out)


def _place_attn(rec: StepRecord, key: tuple[str, str], chunk: list[float], lay: Any) -> None:
    rec.attn[key] = AttnStats(lay.source, lay.heads, lay.rows, lay.keys, chunk[0], chunk[1], chunk[2])


def _loop_stats(rec: StepRecord, key: int, lay: Any) -> LoopStats:
    """The optimizer's LoopStats of this step, made for a check other than the interval's when it has none."""
    s = rec.loop.get(key)
    if s is None:
        s = rec.loop[key] = LoopStats(lay.root, lay.module, -1.0, None, 0, lay.site.line, lay.site.backward_line)
    return s


def _place_clear(rec: StepRecord, key: int, chunk: list[float], lay: Any) -> None:
    """Whether an optimizer's gradient, there after this step's backward pass, was gone when its step began."""
    _loop_stats(rec, key, lay).cleared = lay.cleared if lay.cleared is not None else chunk[0]


def _place_loop(rec: StepRecord, key: int, chunk: list[float], lay: Any) -> None:
    """An optimizer's interval since its last sampled step; the first "kept" of an optimizer is announced to its
    site (model.json then names its lines: loopprobe.LoopSite.kept)."""
    kept, stale = (lay.kept, lay.stale) if lay.kept is not None else (chunk[0], chunk[1])
    site = lay.site
    prev = rec.loop.get(key)
    rec.loop[key] = s = LoopStats(lay.root, lay.module, kept, stale, lay.passes, site.line, site.backward_line)
    if prev is not None:  # the other checks' readings of this step
        s.cleared, s.clipped, s.clip_line = prev.cleared, prev.clipped, prev.clip_line
    if kept >= 0.5:
        site.kept()

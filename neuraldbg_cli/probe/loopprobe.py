"""The training loop as the optimizer steps and backward passes show it (families/loop.py judges it): whether an
optimizer's gradients are zeroed between two of its steps.

After a sampled optimizer step, one parameter it stepped (the first observed one with a dense gradient, not an
embedding's) is remembered, weakly, with an evenly spread slice of its gradient (SLICE elements, copied on the
device). At each backward pass that begins before that optimizer's next step, the parameter's gradient is tested:
set to None (zero_grad()'s default, `p.grad = None`) is seen on the host; zeroed in place (zero_grad(set_to_none=
False), `p.grad.zero_()`, `p.grad.data.zero_()`, which a version counter does not show: `.data` has its own) reads
all zeros in the slice, a 0-d bool on the device, OR-ed over the passes with no host read (on the CPU, where reading
needs no synchronisation, read at once). At the optimizer's next step the interval goes in the step's buffer:
kept (nothing zeroed it and the slice was not all zeros: that step applies the sum of both steps' gradients),
zeroed, or unknown (the slice was all zeros after the step: nothing to tell), with the share of the gradient
left over from before (|slice then| / |slice now|).

Why every backward pass, not the first only: a GAN's generator backward runs through the discriminator after D's
step and adds to D's gradients; D's own zero_grad() comes later, before D's own backward. Intended accumulation
(several backward passes, zeroed after the step) is zeroed before the first of them. A closure optimizer (LBFGS)
runs its backward passes inside step(): no pass falls between two of its steps, and nothing is recorded.

Cost: on sampled steps only, per optimizer a copy of SLICE elements after its step and one reduction of SLICE
elements per backward pass until its next step; nothing is kept that refers to a gradient (a view would make
autograd accumulate out of place)."""

from __future__ import annotations

import os
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.paramsets import ParamSets
from neuraldbg_cli.probe.provenance import call_site
from neuraldbg_cli.probe.records import StepBuffer

SLICE = 256  # gradient elements a check reads: an even sample of the whole tensor (its first rows can be all 0)
RESHAPE_LIMIT = 1 << 16  # a non-contiguous gradient is flattened (a copy) only up to this many elements


class LoopSite:
    """One optimizer, for its whole life: its number (in the order first checked), where the script steps it and
    runs the backward pass that begins its gradient (the latest interval's: _Interval.backward), and whether a check found its gradients kept (then model.json names
    those lines: `note`)."""

    __slots__ = (
        "index",
        "opt_id",
        "step_at",
        "line",
        "backward_at",
        "backward_line",
        "kept_seen",
        "_on_kept",
        "clip_at",
        "clip_line",
        "clip_max",
        "frozen",
    )

    def __init__(self, index: int, opt_id: int, on_kept: Callable[[LoopSite], None]) -> None:
        self.index, self.opt_id, self._on_kept = index, opt_id, on_kept
        self.step_at, self.line = _where()
        self.backward_at, self.backward_line = "", 0
        self.kept_seen = False
        self.clip_at, self.clip_line = "", 0  # the latest clip_grad_*_ call found after its step
        self.clip_max: float | None = None  # that call's max_norm (clip_grad_norm_)
        # it stepped holding no parameter that requires a gradient (a sampled step's check): at which step, how many
        # parameters, which modules; None again once it is seen stepping a trainable one (frozen for a phase)
        self.frozen: dict[str, Any] | None = None

    def kept(self) -> None:
        """A check of this optimizer read "kept" (records._place, as the step's values reach the host)."""
        if not self.kept_seen:
            self.kept_seen = True
            self._on_kept(self)

    def note(self) -> dict[str, Any]:
        """What model.json says of this optimizer's loop: the script lines of its step() and backward() calls."""
        out: dict[str, Any] = {}
        if self.line:
            out["step_at"] = f"{self.step_at}:{self.line}"
        if self.backward_line:
            out["backward_at"] = f"{self.backward_at}:{self.backward_line}"
        if self.clip_line:
            out["clip_at"] = f"{self.clip_at}:{self.clip_line}"
        if self.clip_max is not None:
            out["clip_max_norm"] = self.clip_max
        out["frozen"] = self.frozen  # (None: it trains something, or was never seen otherwise)
        return out


class LoopLayout(NamedTuple):
    """What `records._place` needs of a check besides its values: host values when they are known on the host
    (`kept` None: the values are the part's two floats, kept and stale)."""

    site: LoopSite
    root: str
    module: str
    passes: int
    kept: float | None = None
    stale: float | None = None


class ClipLayout(NamedTuple):
    """A clip_grad_norm_/clip_grad_value_ call: after the optimizer's step with no backward pass since (1.0) or not."""

    site: LoopSite
    root: str
    module: str
    after: float
    line: int


class ClearLayout(NamedTuple):
    """What `records._place` needs of a zeroed-before-step check (`cleared` None: the value is the part's float)."""

    site: LoopSite
    root: str
    module: str
    cleared: float | None = None


class SamplerLayout(NamedTuple):
    """A DistributedSampler iterated (host values): its number, how many times it has been iterated, its epoch
    now, how many distinct epochs its iterations saw, whether it shuffles, the script line of the loop over it."""

    number: int
    iterations: int
    epoch: int
    epochs: int
    shuffle: bool
    line: int


class _Sampler:
    """What the probe remembers of one DistributedSampler (held weakly, by the sampler)."""

    __slots__ = ("index", "iterations", "epochs", "at", "line")

    def __init__(self, index: int) -> None:
        self.index, self.iterations, self.epochs = index, 0, set[int]()
        self.at, self.line = "", 0


class _After(NamedTuple):
    """An optimizer's gradient as a backward pass of a sampled step left it: the parameter it is read off and
    whether its slice held a non-zero (a device bool, or a host bool on the CPU)."""

    param: weakref.ref
    owner: tuple[str, str]
    found: torch.Tensor | bool


class _Interval:
    """An optimizer from its last sampled step to its next step."""

    __slots__ = ("site", "param", "owner", "snap", "found", "zeroed", "zeroed_host", "passes", "backward", "restart")

    def __init__(
        self, site: LoopSite, param: torch.Tensor, owner: tuple[str, str], snap: torch.Tensor, found: torch.Tensor
    ) -> None:
        self.site, self.param, self.owner = site, weakref.ref(param), owner
        self.snap, self.found = snap, found  # the slice after the step; whether it holds a non-zero (device bool)
        self.zeroed: torch.Tensor | None = None  # some pass saw the slice all zeros (device bool, OR-ed)
        self.zeroed_host = False  # some pass saw the gradient None (or, on the CPU, all zeros)
        self.passes = 0
        # where the script runs the first backward pass since the latest optimizer step (of any optimizer): the
        # pass that begins this optimizer's own gradient (a GAN's D: its real batch, not G's pass through D)
        self.backward: tuple[str, int] = ("", 0)
        self.restart = True


_SHOWN: dict[str, str] = {}  # a frame's file name -> as model.json shows it


def _where() -> tuple[str, int]:
    """The script's file (relative to the working directory when under it) and line of the call being observed."""
    file, line = call_site()
    shown = _SHOWN.get(file)
    if shown is None:
        shown = file
        try:
            rel = os.path.relpath(file) if file else ""
            shown = rel if rel and not rel.startswith("..") else file
        except ValueError:  # another drive (Windows)
            pass
        if len(_SHOWN) < 256:
            _SHOWN[file] = shown
    return shown, line


def _read_now(t: torch.Tensor) -> bool:
    """Whether a value on `t`'s device is read on the host at once (the CPU: no device to wait for); elsewhere it
    stays on the device until the step's one transfer."""
    return t.is_cpu


def _slice(g: torch.Tensor) -> torch.Tensor | None:
    """SLICE elements spread evenly over the gradient `g` (a view, no copy, for a contiguous one); None when it has
    no dense elements to read."""
    if g.layout is not torch.strided:
        return None
    g = ts.local(g.detach())
    n = g.numel()
    if not n:
        return None
    if g.is_contiguous():
        flat = g.view(-1)
    elif n <= RESHAPE_LIMIT:
        flat = g.reshape(-1)
    else:
        return None
    return flat[:: max(1, n // SLICE)][:SLICE]


class LoopWatch:
    """Fed by the pacer: `post_step` (an outermost optimizer step ended), `backward_begin`, `pre_step` (the next
    outermost step begins), `sampler_iter`; `on_kept(site)` is called the first time a check of an optimizer
    reads "kept" (None: a sampler's epoch found unchanged), so that model.json names the lines."""

    def __init__(self, sets: ParamSets, guard: Guard, on_kept: Callable[[LoopSite | None], None]) -> None:
        self._sets, self._guard, self._on_kept = sets, guard, on_kept
        self._sites: weakref.WeakKeyDictionary[torch.optim.Optimizer, LoopSite] = weakref.WeakKeyDictionary()
        self._open: weakref.WeakKeyDictionary[torch.optim.Optimizer, _Interval] = weakref.WeakKeyDictionary()
        self._after: weakref.WeakKeyDictionary[torch.optim.Optimizer, _After] = weakref.WeakKeyDictionary()
        self._count = 0
        self._samplers: weakref.WeakKeyDictionary[Any, _Sampler] = weakref.WeakKeyDictionary()
        self.sampler_at = ""  # "file:line" of the loop over the first sampler found iterated with an unchanged epoch
        self._last: weakref.ref | None = None  # the optimizer that stepped last
        self._fresh = False  # a step ended and no backward pass began since: gradients the step already applied
        self._backward_seen = False  # some backward pass has begun in this process
        self.scheduler_early: dict[str, Any] | None = None  # a scheduler stepped before its optimizer's first step
        self._early: tuple[weakref.ref, dict[str, Any]] | None = None  # one, after a backward pass: not yet told

    def _site(self, opt: torch.optim.Optimizer) -> LoopSite:
        """The optimizer's LoopSite, made (and numbered) the first time it is needed."""
        site = self._sites.get(opt)
        if site is None:
            site = self._sites[opt] = LoopSite(self._count, id(opt), self._on_kept)
            self._count += 1
        return site

    def _first_grad(self, opt: torch.optim.Optimizer) -> tuple[torch.Tensor, tuple[str, str], torch.Tensor] | None:
        """The first parameter the optimizer steps with a dense gradient, its owner, and the gradient's slice (the
        one parameter every check of that optimizer reads); None when none has one."""
        ps, sparse = self._sets.of_optimizer(opt), self._sets.sparse()
        for p, owner in zip(ps.params, ps.owners):
            g = p.grad
            if g is None or id(p) in sparse:
                continue
            part = _slice(g)
            if part is not None:
                return p, owner, part
        return None

    def post_step(self, opt: torch.optim.Optimizer, buf: StepBuffer) -> None:
        """An optimizer step ended: the other optimizers' next backward pass is their own (see _Interval.backward);
        a sampled one remembers one parameter it stepped and a slice of its gradient."""
        self._fresh = True
        if self._last is None or self._last() is not opt:
            self._last = weakref.ref(opt)
        if self._open:
            self._open.pop(opt, None)
            for iv in self._open.values():
                iv.restart = True
        if not buf.sampled or "loop" in self._guard.off:
            return
        try:
            site = self._site(opt)
            first = self._first_grad(opt)
            if first is None:
                self._frozen(opt, site, buf.step)
                return
            if site.frozen is not None:  # it trains something now: frozen for a phase only
                site.frozen = None
                self._on_kept(site)
            p, owner, part = first
            with torch.no_grad():
                snap = part.clone()
                found = snap.any()
            if _read_now(snap) and not found:  # all zeros: nothing to tell (read at once on the CPU)
                return
            self._open[opt] = _Interval(site, p, owner, snap, found)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def _frozen(self, opt: torch.optim.Optimizer, site: LoopSite, step: int) -> None:
        """A sampled step of an optimizer none of whose parameters has a gradient: does any of them require one?
        When none does, it steps only frozen parameters: it can train nothing (model.json says so)."""
        if site.frozen is not None:
            return
        params = [p for g in opt.param_groups for p in g["params"]]
        if not params or any(p.requires_grad for p in params):
            return
        modules = sorted({f"{root}.{name}" if name else root for root, name in self._sets.of_optimizer(opt).owners})
        site.frozen = {"step": step, "params": sum(p.numel() for p in params), "modules": modules[:6]}
        self._on_kept(site)

    def backward_begin(self) -> None:
        """A backward pass begins: for each optimizer between two steps, was its gradient zeroed since its step?"""
        self._backward_seen = True
        if self._early is not None:  # the step after that backward pass never came (a GradScaler skipped it)
            self._early = None
        if not self._open or "loop" in self._guard.off:
            return
        try:
            for opt, iv in list(self._open.items()):
                iv.passes += 1
                if iv.restart:
                    iv.restart, iv.backward = False, _where()
                if iv.zeroed_host:
                    continue
                p = iv.param()
                if p is None:  # the model is gone
                    del self._open[opt]
                    continue
                g = p.grad
                if g is None:
                    iv.zeroed_host = True
                    continue
                part = _slice(g)
                if part is None or part.shape != iv.snap.shape:  # replaced by something else: nothing to tell
                    del self._open[opt]
                    continue
                with torch.no_grad():
                    zero = part.any().logical_not()
                    if _read_now(zero):
                        iv.zeroed_host = bool(zero)
                    else:
                        iv.zeroed = zero if iv.zeroed is None else iv.zeroed.logical_or(zero)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def clipped(self, buf: StepBuffer, max_norm: float | None) -> None:
        """clip_grad_norm_/clip_grad_value_ is called: right after the latest optimizer step, with no backward pass
        since, it clips the gradients that step already applied (and that zero_grad() will discard)."""
        opt = self._last() if self._last is not None else None
        if opt is None or "loop" in self._guard.off:
            return
        try:
            site = self._site(opt)
            owners = self._sets.of_optimizer(opt).owners
            root, module = owners[0] if owners else ("", "")
            line = 0
            if self._fresh:
                site.clip_at, line = _where()
                if not site.clip_line:
                    site.clip_line, site.clip_max = line, max_norm
                    self._on_kept(site)  # model.json names the lines
            buf.extend("loopclip", site.index, [], ClipLayout(site, root, module, float(self._fresh), line))
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def scheduler_step(self, sched: Any) -> list[float] | None:
        """An lr scheduler's step() is called (before it runs): its first call after its construction, with its
        optimizer never stepped since (torch's own flag, `_opt_called`, set by the step wrapper the scheduler put
        on the optimizer), skips the schedule's first value. Returns the lrs before the call when it is such a
        call (scheduler_stepped then reads them after it)."""
        if self.scheduler_early is not None or "loop" in self._guard.off:
            return None
        try:
            opt = getattr(sched, "optimizer", None)
            if getattr(sched, "_step_count", None) != 1 or opt is None or getattr(opt, "_opt_called", False):
                return None
            if not hasattr(getattr(opt, "step", None), "_wrapped_by_lr_sched"):
                return None  # step() replaced after the scheduler was made: torch's flag tells nothing
            return [float(g["lr"]) for g in opt.param_groups]
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)
            return None

    def scheduler_stepped(self, sched: Any, before: list[float], step: int) -> None:
        """Such a call returned: before any backward pass it is told at once (the schedule begins a value late);
        after one, only when the optimizer's step comes next (the scheduler stepped between backward() and
        step()). A backward pass that comes first means that step was skipped (a GradScaler's inf check): then
        the order was right and nothing is told."""
        try:
            at, line = _where()
            fact = {
                "scheduler": type(sched).__name__,
                "at": f"{at}:{line}" if line else at,
                "step": step,
                "lr_before": before[0] if before else None,
                "lr_after": float(sched.optimizer.param_groups[0]["lr"]),
                "changed": any(
                    abs(float(g["lr"]) - b) > 1e-12 * max(abs(b), 1e-30)
                    for g, b in zip(sched.optimizer.param_groups, before)
                ),
                "where": "before any backward pass" if not self._backward_seen else "between backward() and step()",
            }
            if self._backward_seen:
                self._early = (weakref.ref(sched.optimizer), fact)
            else:
                self._told(fact)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def _told(self, fact: dict[str, Any]) -> None:
        self._early = None
        if self.scheduler_early is None:
            self.scheduler_early = fact
            self._on_kept(None)  # model.json names it

    def sampler_iter(self, sampler: Any, buf: StepBuffer) -> None:
        """A DistributedSampler is iterated (an epoch's `for batch in loader` begins): its epoch then, against the
        epochs of its earlier iterations. Without `set_epoch(epoch)` every epoch draws the same order."""
        if "loop" in self._guard.off:
            return
        try:
            seen = self._samplers.get(sampler)
            if seen is None:
                seen = self._samplers[sampler] = _Sampler(len(self._samplers))
            epoch = int(getattr(sampler, "epoch", 0))
            seen.iterations += 1
            if len(seen.epochs) < 64:
                seen.epochs.add(epoch)
            seen.at, seen.line = _where()
            shuffle = bool(getattr(sampler, "shuffle", False))
            if shuffle and seen.iterations >= 2 and len(seen.epochs) == 1 and not self.sampler_at:
                self.sampler_at = f"{seen.at}:{seen.line}"
                self._on_kept(None)  # model.json names the line
            lay = SamplerLayout(seen.index, seen.iterations, epoch, len(seen.epochs), shuffle, seen.line)
            buf.extend("sampler", seen.index, [], lay)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def backward_end(self, buf: StepBuffer, inside: bool = False) -> None:
        """A backward pass of a sampled step ended: for each optimizer seen stepping, whether the gradient of one
        parameter it steps holds a non-zero now (pre_step then tells whether it was still there at the step).
        `inside` an optimizer step (a closure's backward, Lightning's): new gradients, but not judged."""
        self._fresh = False
        if inside or not buf.sampled or not self._sites or "loop" in self._guard.off:
            return
        try:
            for opt in list(self._sites.keys()):
                if opt in self._after:
                    continue
                first = self._first_grad(opt)
                if first is None:
                    continue
                p, owner, part = first
                with torch.no_grad():
                    found = part.any()
                if not _read_now(found):
                    self._after[opt] = _After(weakref.ref(p), owner, found)
                elif bool(found):  # (all zeros after the backward pass: nothing to tell)
                    self._after[opt] = _After(weakref.ref(p), owner, True)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

    def _cleared(self, opt: torch.optim.Optimizer, buf: StepBuffer) -> None:
        """The optimizer's step begins: was the gradient a backward pass of this step left gone (None, or all
        zeros: a zero_grad() between backward() and step())?"""
        chk = self._after.pop(opt, None)
        site = self._sites.get(opt)
        if chk is None or site is None or not buf.sampled:
            return
        p = chk.param()
        if p is None:
            return
        layout = ClearLayout(site, chk.owner[0], chk.owner[1])
        g = p.grad
        if g is None:  # set to None since: cleared, if it held something (else nothing to tell)
            if isinstance(chk.found, bool):
                buf.extend("loopclear", site.index, [], layout._replace(cleared=1.0))
            else:
                buf.add("loopclear", site.index, (chk.found.float() * 2 - 1).reshape(1), layout)
            return
        part = _slice(g)
        if part is None:
            return
        with torch.no_grad():
            gone = part.any().logical_not()
            if isinstance(chk.found, bool) and _read_now(gone):
                buf.extend("loopclear", site.index, [], layout._replace(cleared=float(bool(gone))))
                return
            found = chk.found if isinstance(chk.found, torch.Tensor) else torch.ones((), dtype=torch.bool)
            both = found.to(gone.device).logical_and(gone).float() - found.to(gone.device).logical_not().float()
            buf.add("loopclear", site.index, both.reshape(1), layout)

    def pre_step(self, opt: torch.optim.Optimizer, buf: StepBuffer) -> None:
        """The optimizer's next step begins: its interval, if a backward pass fell in it, goes in the buffer; and
        whether the gradient this step's backward pass left is still there (_cleared)."""
        if self._early is not None and self._early[0]() is opt:
            self._told(self._early[1])
        if self._after and "loop" not in self._guard.off:
            try:
                self._cleared(opt, buf)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("loop", e)
        iv = self._open.pop(opt, None) if self._open else None
        if iv is None or not iv.passes or "loop" in self._guard.off:
            return
        try:
            p = iv.param()
            if p is None:
                return
            site = iv.site
            if iv.backward[1]:
                site.backward_at, site.backward_line = iv.backward
            layout = LoopLayout(site, iv.owner[0], iv.owner[1], iv.passes)
            g = p.grad
            if iv.zeroed_host or g is None:
                buf.extend("loop", iv.site.index, [], layout._replace(kept=0.0))
                return
            part = _slice(g)
            if part is None or part.shape != iv.snap.shape:
                return
            with torch.no_grad():
                now = torch.linalg.vector_norm(part.float())
                stale = torch.linalg.vector_norm(iv.snap.float()) / now.clamp_min(1e-30)
                if _read_now(iv.snap):  # found (else no interval) and never zeroed: kept
                    buf.extend("loop", iv.site.index, [], layout._replace(kept=1.0, stale=stale.item()))
                    return
                zeroed = iv.zeroed if iv.zeroed is not None else torch.zeros((), dtype=torch.bool, device=part.device)
                kept = iv.found.logical_and(zeroed.logical_not()).float() - iv.found.logical_not().float()
                buf.add("loop", iv.site.index, torch.stack([kept, stale.to(kept.device)]), layout)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("loop", e)

"""Training steps as torch reports them. The optimizer step hooks, zero_grad and the end of each backward pass
feed the StepClock, which decides what a step is (see stepclock); the pacer acts on its answers: it reads
gradients where they are complete, measures the update of sampled optimizer steps, gives each optimizer step
its losses, and has the StepCloser close steps (their last statistics, then the outbox: see stepcloser)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from neuraldbg_cli.errors import StopTraining
from neuraldbg_cli.probe.gradreader import GradReader, UpdateBefore
from neuraldbg_cli.probe.guard import Guard, compiling
from neuraldbg_cli.probe.loopprobe import LoopWatch
from neuraldbg_cli.probe.optimizers import OptimizerWatch
from neuraldbg_cli.probe.paramsets import ParamSets
from neuraldbg_cli.probe.records import Outbox, Steps
from neuraldbg_cli.probe.rootfinder import RootFinder
from neuraldbg_cli.probe.stepclock import CLOSE, READ, StepClock
from neuraldbg_cli.probe.stepcloser import StepCloser


def _has_grads(obj: Any) -> bool:
    """Whether a module's or optimizer's parameters hold any gradient (zero_grad would discard it)."""
    params = (
        obj.parameters() if isinstance(obj, torch.nn.Module) else (p for g in obj.param_groups for p in g["params"])
    )
    return any(p.grad is not None for p in params)


class StepPacer:
    """`stop_requested` (--stop-on): end the training when the next optimizer step closes a step."""

    def __init__(
        self,
        steps: Steps,
        guard: Guard,
        sets: ParamSets,
        grads: GradReader,
        opts: OptimizerWatch,
        finder: RootFinder,
        outbox: Outbox,
        loop: LoopWatch,
    ) -> None:
        self._steps, self._guard, self._sets, self._grads = steps, guard, sets, grads
        self._opts, self._loop = opts, loop
        self.clock = StepClock()
        self._closer = StepCloser(steps, guard, grads, finder, outbox, self.clock)
        self.stop_requested = False
        self.max_steps: int | None = None  # a verify trial: end the training cleanly after this many steps
        self.limit_reached = False
        self._closure = False  # the optimizer step under way was given a closure: read gradients after it
        self._before: UpdateBefore | None = None  # of the sampled optimizer step under way
        self._versions: int | None = None  # before any optimizer step: the parameters' versions at the last backward
        self._manual: UpdateBefore | None = None  # the last sampled backward-counted step's (see kept_grads)

    # ---- optimizer steps ----

    def pre_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Gradients are complete (and unscaled by a GradScaler) exactly here, for this optimizer's params;
        a closure step (LBFGS, Lightning) computes them inside step(): they are read after it. Only the
        outermost step counts (a wrapper optimizer stepping the one inside, a subclass's super().step())."""
        off = self._guard.off
        if not self._guard.mine() or not self.clock.step_begin():
            return
        if self.clock.takes_over(id(opt)):
            self._closer.close_before()
        self._loop.pre_step(opt, self._steps.buf)
        if "grads" in off:
            return
        buf = self._steps.buf
        try:
            ps = self._sets.of_optimizer(opt)
            self._closure = bool(args and callable(args[0])) or callable(kwargs.get("closure"))
            if not self._closure:
                self._grads.norms(buf, ps)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("grads", e)
            return
        if buf.sampled and "update" not in off:
            try:
                self._before = self._grads.before_update(buf, ps)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("update", e)

    def post_step(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """The outermost optimizer step ended: read what it left (a closure step's gradients, the update of a
        sampled step), give it the losses since the last step, and close the training step if it paces."""
        guard, off = self._guard, self._guard.off
        if not guard.mine():
            return
        buf = self._steps.buf
        try:
            closes = self.clock.step_end(id(opt), lambda key: self._opts.alive(key, buf.active))
        except Exception as e:  # noqa: BLE001
            guard.fault("step", e)
            return
        if closes is None:
            return
        self._loop.post_step(opt, buf)
        closure, before, self._closure, self._before = self._closure, self._before, False, None
        if closure and "grads" not in off:
            try:
                self._grads.norms(buf, self._sets.of_optimizer(opt))
            except Exception as e:  # noqa: BLE001
                guard.fault("grads", e)
        if before is not None and before.buf is buf and "update" not in off:
            try:
                self._grads.update(before)
            except Exception as e:  # noqa: BLE001
                guard.fault("update", e)
        try:
            self._opts.stepped(opt)
            if buf.sampled:
                self._opts.record_lr(opt, buf.step)
            owners = self._sets.of_optimizer(opt).owners
            if not any(o is owners for o in buf.stepped):  # (cached per parameter set: one entry per optimizer)
                buf.stepped.append(owners)
            series = self._opts.series(opt)
            lead = id(opt) == self.clock.lead
            buf.assign_loss(series, main=lead)
            if lead:
                self._closer.series = series
            if closes:
                self._closer.advance()
        except Exception as e:  # noqa: BLE001
            guard.fault("step", e)
        if closes and self.stop_requested:  # a step boundary: the weights are updated, no backward under way
            self.stop_requested = False
            raise StopTraining()
        if closes and self.max_steps is not None and self._steps.step >= self.max_steps and not self.limit_reached:
            self.limit_reached = True
            raise StopTraining()

    def wrap_zero_grad(self, original: Callable) -> Callable:
        """Optimizer.zero_grad / Module.zero_grad, patched: discarding gradients no optimizer step used ends a
        step (see StepClock.zero_grad); it is closed first, while its gradients can still be read."""
        pacer = self

        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not compiling() and "step" not in pacer._guard.off and pacer._guard.mine():
                try:
                    # a GradScaler's skipped step (scaled gradients, no optimizer step) is no forgotten step, nor
                    # are backward passes run for an input's gradient (an attack's, see StepBuffer.input_grad)
                    buf = pacer._steps.buf
                    discards = lambda: not buf.scaled and not buf.input_grad and _has_grads(obj)  # noqa: E731
                    if pacer.clock.zero_grad(discards, pacer._changed):
                        pacer._closer.advance()
                    else:
                        pacer._drop_discarded(obj)
                except Exception as e:  # noqa: BLE001
                    pacer._guard.fault("step", e)
            return original(obj, *args, **kwargs)

        zero_grad.__wrapped__ = original  # type: ignore[attr-defined]
        return zero_grad

    def wrap_clip(self, original: Callable, max_norm_at: int | None) -> Callable:
        """torch.nn.utils.clip_grad_norm_ / clip_grad_value_, patched: the loop checks where in the step the call
        comes (loopprobe.LoopWatch.clipped). `max_norm_at`: the position of clip_grad_norm_'s max_norm."""
        pacer = self

        def clip(*args: Any, **kwargs: Any) -> Any:
            if not compiling() and pacer._guard.mine():
                limit = kwargs.get("max_norm")
                if limit is None and max_norm_at is not None and len(args) > max_norm_at:
                    limit = args[max_norm_at]
                pacer._loop.clipped(pacer._steps.buf, float(limit) if isinstance(limit, (int, float)) else None)
            return original(*args, **kwargs)

        clip.__wrapped__ = original  # type: ignore[attr-defined]
        return clip

    def wrap_sampler_iter(self, original: Callable) -> Callable:
        """DistributedSampler.__iter__, patched: the loop notes each sampler's epoch as an epoch's iteration over
        it begins (loopprobe.LoopWatch.sampler_iter)."""
        pacer = self

        def __iter__(sampler: Any) -> Any:
            if pacer._guard.mine():
                pacer._loop.sampler_iter(sampler, pacer._steps.buf)
            return original(sampler)

        __iter__.__wrapped__ = original  # type: ignore[attr-defined]
        return __iter__

    def wrap_scheduler_step(self, original: Callable) -> Callable:
        """LRScheduler.step, patched: the loop checks the first call comes after the optimizer's first step
        (loopprobe.LoopWatch.scheduler_step). One attribute read per call after that one."""
        pacer = self

        def step(sched: Any, *args: Any, **kwargs: Any) -> Any:
            before = None
            if pacer._guard.mine() and not compiling():
                before = pacer._loop.scheduler_step(sched)
            out = original(sched, *args, **kwargs)
            if before is not None:
                pacer._loop.scheduler_stepped(sched, before, pacer._steps.step)
            return out

        step.__wrapped__ = original  # type: ignore[attr-defined]
        return step

    def _drop_discarded(self, obj: Any) -> None:
        """A zero_grad that no step close preceded: when it discards every gradient the models hold, the
        backward passes since the last optimizer step served no update (an adversarial attack's inner loop
        takes the input's gradient with loss.backward(), then zero_grad() clears what reached the weights):
        their losses are no part of the step's loss (a NaN/Inf among them still is: see discard_losses). Kept
        when a GradScaler scaled them (a skipped step's loss), inside an optimizer step (a closure zeroes before
        its own backward) and when some other parameter still holds a gradient (one model's zero_grad between
        two models' backward passes)."""
        buf, clock = self._steps.buf, self.clock
        if buf.pending is None or buf.scaled or clock.depth or clock.done or not _has_grads(obj):
            return
        mine = (
            {id(p) for p in obj.parameters()}
            if isinstance(obj, torch.nn.Module)
            else {id(p) for g in obj.param_groups for p in g["params"]}
        )
        if any(p.grad is not None and id(p) not in mine for p in self._sets.every().params):
            return
        buf.discard_losses()

    # ---- backward passes ----

    def backward_end(self, scaled: bool) -> None:
        """A backward pass ended: accumulate into the step (an optimizer exists), or read the gradients of a
        backward-counted step now (a zero_grad may follow), or close a step that hit the accumulation limit.
        `scaled`: its loss was scaled by a GradScaler."""
        try:
            act = self.clock.backward_end(bool(self._opts.optimizers))
            if not self.clock.stepped and self._opts.optimizers:  # (until the first optimizer step: see _changed)
                self._versions = self._version_sum()
        except Exception as e:  # noqa: BLE001
            self._guard.fault("step", e)
            return
        if scaled and self._opts.optimizers:
            # GradScaler: gradients are still scaled here (and inf on steps it will skip); they are read
            # unscaled at the optimizer's pre-step, and its step, not this backward, ends the step
            self._steps.buf.scaled = True
        elif act == READ and "grads" not in self._guard.off:
            buf = self._steps.buf
            try:
                self._grads.norms(buf, self._sets.every())
            except Exception as e:  # noqa: BLE001
                self._guard.fault("grads", e)
            if buf.sampled and not self._opts.optimizers and "update" not in self._guard.off:
                try:  # no optimizer: the script's own update follows, measured when the step closes
                    buf.manual = self._manual = self._grads.before_manual(buf, self._sets.every())
                except Exception as e:  # noqa: BLE001
                    self._guard.fault("update", e)
        self._loop.backward_end(self._steps.buf, inside=bool(self.clock.depth))
        if act == CLOSE:
            self._closer.advance_or_fault()

    def _version_sum(self) -> int:
        """The parameters' in-place version counters, summed: any in-place change of one moves it."""
        return sum(p._version for p in self._sets.every().params)

    def _changed(self) -> bool:
        """Whether a parameter was changed in place since the last backward pass (StepClock.zero_grad: SAM's
        climb before its first optimizer step)."""
        return self._versions is not None and self._version_sum() != self._versions

    def backward_begin(self) -> None:
        """A backward pass begins: a due backward-counted step closes (close_due), and the loop checks whether the
        gradients were zeroed since each optimizer's last step (see loopprobe)."""
        self.close_due()
        manual, self._manual = self._manual, None
        if manual is not None and not self._opts.optimizers and "update" not in self._guard.off:
            try:  # were the last sampled manual step's gradients zeroed since?
                self._grads.kept_grads(self._steps.buf, manual)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("update", e)
        self._loop.backward_begin()

    def close_due(self) -> None:
        """A forward or backward pass begins: a backward-counted step (no optimizer: see StepClock) closes
        now, so that a manual update or an optimizer.step() right after its backward still belonged to it."""
        if self.clock.due():
            self._closer.advance_or_fault()

    # ---- the end of the run ----

    def finish(self) -> None:
        """The run ends: see StepCloser.finish."""
        self._closer.finish()

"""Closing training steps, apart from deciding when: the pacer acts on the StepClock's answers and calls here
when a step ends. A step is closed with its last statistics (gradient, and on sampled steps weight,
statistics; parameters unfrozen since, on a re-scan schedule) and the losses no optimizer step took, then
queued in the outbox. At the end of the run the step under way is closed too, unless it is an idle tail."""

from __future__ import annotations

import math
import time

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.gradreader import GradReader
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.records import Outbox, StepBuffer, Steps
from neuraldbg_cli.probe.rootfinder import RootFinder
from neuraldbg_cli.probe.stepclock import StepClock

RESCAN_EVERY = 10  # steps between re-scans for unfrozen parameters (the default schedule's sampling period)


class StepCloser:
    """`series`: the loss series of the leading optimizer (the pacer sets it at that optimizer's steps): losses
    no optimizer step took go there."""

    def __init__(
        self, steps: Steps, guard: Guard, grads: GradReader, finder: RootFinder, outbox: Outbox, clock: StepClock
    ) -> None:
        self._steps, self._guard, self._grads = steps, guard, grads
        self._finder, self._outbox, self._clock = finder, outbox, clock
        self.series = ""
        self._rescanned = 0  # the last step whose close re-scanned the models for new parameters

    def advance(self) -> None:
        self._finalize()
        self._steps.next()

    def advance_or_fault(self) -> None:
        try:
            self.advance()
        except Exception as e:  # noqa: BLE001
            self._guard.fault("step", e)

    def close_before(self) -> None:
        """A new phase's optimizer steps a second time (StepClock.takes_over): its first update, still in the
        step under way, closes that step now. What the backward passes since belong to moves to the next step
        (their loss, whether a GradScaler scaled them, the models they ran); the forward passes' values stay
        behind (a NaN they made shows one step early)."""
        buf = self._steps.buf
        pending, buf.pending = buf.pending, None
        try:
            self.advance()
        except Exception as e:  # noqa: BLE001
            self._guard.fault("step", e)
        new = self._steps.buf
        new.pending = pending
        if new is not buf:
            new.scaled = buf.scaled
            new.active.update(buf.active)

    def finish(self) -> None:
        """The run ends: close the step under way, unless it came after training (see _after_training) and made
        nothing non-finite; one that made a NaN/Inf is closed as a tail, which no step count includes."""
        buf = self._steps.buf
        buf.settle(False)
        if not (buf.parts or buf.checks or buf.losses or buf.pending is not None):
            return
        if not self._after_training(buf):
            self._finalize()
        elif not self._finite(buf):  # a NaN/Inf the last forward passes made is reported, as no step of training
            buf.tail = True
            self._finalize()

    def _finalize(self) -> None:
        """Close the current step: add gradient (and on sampled steps weight) statistics, queue it. Losses no
        optimizer step took (a backward-counted step) go to the last pacing optimizer's series."""
        buf, off = self._steps.buf, self._guard.off
        buf.time = time.perf_counter()
        if buf.held:  # outputs of a forward pass no backward pass followed (an evaluation with gradients on)
            buf.settle(False)
        buf.assign_loss(self.series)
        # parameters unfrozen since: a sampled step is often enough, and after the first RESCAN_EVERY steps one
        # in RESCAN_EVERY (the walk over every module is a sampled step's largest Python cost under --every 1)
        if buf.sampled and "rescan" not in off and self._rescan_due(buf.step):
            try:
                for root in self._finder.live:
                    self._finder.rescan(root)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("rescan", e)
        # what the script's own update did (see before_manual); an optimizer that stepped (one made before the
        # observation began, which no construction hook saw) measured its own update at its step
        manual, buf.manual = buf.manual, None
        if manual is not None and not buf.stepped and "update" not in off:
            try:
                self._grads.update(manual)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("update", e)
        if "grads" not in off:
            try:
                self._grads.step_stats(buf)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("grads", e)
        self._outbox.put(buf)

    def _rescan_due(self, step: int) -> bool:
        if step < RESCAN_EVERY:
            return True
        if step < self._rescanned + RESCAN_EVERY:
            return False
        self._rescanned = step
        return True

    def _after_training(self, buf: StepBuffer) -> bool:
        """After training, a last step that no optimizer step completes is no training step: one that only saw
        forward passes (a final evaluation or prediction without no_grad), or, once an optimizer has stepped,
        backward passes that accumulate for a step that never comes (the last micro-batches of an epoch)."""
        clock = self._clock
        if not self._steps.step or clock.done or buf.losses:
            return False
        return not (clock.backwards and (not clock.stepped or clock.fallback))  # backward passes are steps here

    def _finite(self, buf: StepBuffer) -> bool:
        """Whether what the step under way computed is all finite (read here, once, at the end of the run)."""
        tail = buf.parts + buf.checks + ([buf.pending.detach()] if buf.pending is not None else [])
        try:
            return math.isfinite(sum(ts.host_values(tail)))
        except Exception:  # noqa: BLE001
            return True

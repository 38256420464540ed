"""Backward passes: torch.autograd.backward (which Tensor.backward calls) and GradScaler.scale, wrapped. Each
pass's loss is kept for its step (summed, see StepClock.take_loss), and the step pacing hears when a pass
begins and ends. A GradScaler's scaled loss is kept unscaled, as scale() received it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from neuraldbg_cli.probe.graphwatch import GraphWatch
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.records import Steps
from neuraldbg_cli.probe.stepclock import StepClock


class BackwardWatch:
    """`begin()` before a pass (a due backward-counted step closes), `end(scaled)` after it; `graphs` sees each
    pass's loss (graphs kept alive across steps)."""

    def __init__(
        self,
        steps: Steps,
        clock: StepClock,
        guard: Guard,
        begin: Callable[[], None],
        end: Callable[[bool], None],
        graphs: GraphWatch | None = None,
    ) -> None:
        self._steps, self._clock, self._guard, self._begin, self._end = steps, clock, guard, begin, end
        self._graphs = graphs
        self._in_backward = False  # a backward called inside one (a hook's own autograd call) is not a pass
        self._scaled: set[int] = set()  # id() of GradScaler outputs whose unscaled loss is already kept

    def wrap_backward(self, original: Callable) -> Callable:
        watch = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if watch._in_backward or "backward" in watch._guard.off or not watch._guard.mine():
                return original(tensors, *args, **kwargs)
            watch._in_backward = True
            try:
                watch._begin()
                scaled = False
                try:
                    loss = _loss_tensor(tensors)
                    scaled = watch._record_loss(loss)
                    watch._settle(loss)
                    buf = watch._steps.buf
                    if buf.sampled and watch._graphs is not None:  # (sampled steps only: no call on the others)
                        retain = args[1] if len(args) > 1 else kwargs.get("retain_graph")
                        watch._graphs.capture(buf, loss, bool(retain))
                except Exception as e:  # noqa: BLE001
                    watch._guard.fault("backward", e)
                result = original(tensors, *args, **kwargs)
                watch._end(scaled)
                return result
            finally:
                watch._in_backward = False

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        return backward

    def wrap_scale(self, original: Callable) -> Callable:
        watch = self

        def scale(scaler: Any, outputs: Any) -> Any:
            result = original(scaler, outputs)
            try:
                if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and watch._guard.mine():
                    if watch._clock.take_loss():
                        watch._steps.buf.add_loss(_scalar(outputs))
                    watch._scaled.add(id(result))
            except Exception as e:  # noqa: BLE001
                watch._guard.fault("loss", e)
            return result

        return scale

    def _settle(self, t: torch.Tensor | None) -> None:
        """The outputs held unchecked since their forward pass (StepBuffer.watch) are cleared by a finite loss `t`;
        anything else (a non-finite loss, a backward from a non-scalar: `t` None) checks them."""
        buf = self._steps.buf
        if buf.held or buf.unchecked:
            buf.settle(t is not None and t.is_cpu and math.isfinite(t.item()))

    def _record_loss(self, t: torch.Tensor | None) -> bool:
        """Keep the loss `t` of this backward pass (see _loss_tensor); True when it is a GradScaler-scaled loss,
        whose unscaled value scale() already kept."""
        if t is None:
            return False
        if id(t) in self._scaled:
            self._scaled.discard(id(t))
            return True
        if self._clock.take_loss():
            self._steps.buf.add_loss(_scalar(t))
        return False


def _loss_tensor(tensors: Any) -> torch.Tensor | None:
    """The one-element float tensor a backward pass starts from (its loss), else None."""
    t = tensors if isinstance(tensors, torch.Tensor) else None
    if t is None and isinstance(tensors, (tuple, list)) and len(tensors) == 1:
        t = tensors[0] if isinstance(tensors[0], torch.Tensor) else None
    if t is None or t.numel() != 1 or not t.is_floating_point():
        return None
    return t


def _scalar(t: torch.Tensor) -> torch.Tensor:
    """The loss as a detached 0-d float32 tensor; no op beyond the detach in the usual case, a 0-d float32 loss
    (every backward pass pays this)."""
    t = t.detach()
    if t.dtype is not torch.float32:
        t = t.float()
    return t.reshape(()) if t.dim() else t

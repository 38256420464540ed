"""What is data: tensors that come from outside the models.

A model's first positional argument is its data unless it came from a model: it has a grad_fn (another
model's output, a GAN's sample), it needs a gradient (an input being optimised), or it shares storage with a
recent output of a model, also one made under no_grad or `.detach()`ed since (a recurrent state handed back,
a detached GAN sample, a teacher's prediction). Storage identity, not data_ptr: torch keeps one Python
object per live storage, so a weak reference to it lives exactly as long as the memory, and a new batch that
reuses a freed output's address is never mistaken for it. A bool tensor is a mask, integer ids have no
float statistics. Targets are arguments of loss modules and loss functions only, judged by the same rule."""

from __future__ import annotations

import os
import sys
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

import torch

# torch.nn.functional losses whose target is a float tensor (the 2nd argument, or `target=`). nn loss modules
# call these too: the caller observes a loss module's target and skips calls made inside a module.
FLOAT_TARGET_LOSSES = (
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "huber_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "kl_div",
    "poisson_nll_loss",
    "gaussian_nll_loss",
)
OUTPUTS_KEPT = 64  # model outputs remembered (storages, weakly): a few steps of a few models' outputs
TENSORS_PER_OUTPUT = 8  # of one call's output: (output, (h, c)) and similar, not a whole KV cache


_INSIDE = (os.path.dirname(torch.__file__), os.path.dirname(__file__))  # torch's and neuraldbg's own frames


def call_site() -> tuple[str, int]:
    """Where the script made the call being observed (file, line), past torch's and neuraldbg's frames.
    Reads only the code position of each frame, never its locals."""
    frame: FrameType | None = sys._getframe(1)
    for _ in range(24):
        if frame is None:
            break
        if not frame.f_code.co_filename.startswith(_INSIDE):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "", 0


class Sites:
    """One call site per data site: a GAN's three loss calls have three targets (fakes labelled 0, reals 1,
    then fakes labelled 1), and a model may be called on real and on generated batches. Statistics read from
    whichever call came first in a step would jump between them whenever the step boundary moves, so only
    the first call site seen gives a site its statistics; the others get the non-finite check. A canonical
    site unseen for `STALE` steps gives way to the next one."""

    STALE = 100

    def __init__(self) -> None:
        self._canon: dict[tuple, list] = {}  # data key -> [(file, line), last step seen]

    def canonical(self, key: tuple, step: int) -> bool:
        site = call_site()
        hit = self._canon.get(key)
        if hit is None or (hit[0] != site and step - hit[1] > self.STALE):
            self._canon[key] = [site, step]
            return True
        if hit[0] == site:
            hit[1] = step
            return True
        return False


def first_tensor(args: Any, depth: int = 0) -> torch.Tensor | None:
    """The first tensor of a call's positional arguments, by position (into tuples/lists/dicts)."""
    for a in args.values() if isinstance(args, dict) else args:
        if isinstance(a, torch.Tensor):
            return a
        if depth < 2 and isinstance(a, (tuple, list, dict)):
            t = first_tensor(a, depth + 1)
            if t is not None:
                return t
    return None


def items_of(obj: Any) -> Iterable[Any] | None:
    """What a module output holds, one level down (tuple, list, dict values, dataclass-ish fields); None for
    anything else. The one container walk that output readers share."""
    if isinstance(obj, (tuple, list)):
        return obj
    if isinstance(obj, dict):
        return obj.values()
    if hasattr(obj, "__dataclass_fields__"):
        return [getattr(obj, f, None) for f in obj.__dataclass_fields__]
    return None


def _tensors(obj: Any, out: list, depth: int = 0) -> None:
    if len(out) >= TENSORS_PER_OUTPUT:
        return
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif depth < 3:
        for item in items_of(obj) or ():
            _tensors(item, out, depth + 1)


def _storage(t: torch.Tensor) -> Any:
    try:
        return t.untyped_storage() if t.layout == torch.strided else None
    except Exception:  # noqa: BLE001 - a tensor subclass or a fake tensor without storage
        return None


class Outputs:
    """A bounded record of the storages of recent model outputs, held weakly."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref] = {}
        self._order: deque[int] = deque()

    def add(self, output: Any) -> None:
        found: list[torch.Tensor] = []
        _tensors(output, found)
        for t in found:
            s = _storage(t)
            if s is None:
                continue
            key = id(s)
            ref = self._refs.get(key)
            if ref is not None and ref() is s:
                continue
            if ref is None:
                self._order.append(key)
            self._refs[key] = weakref.ref(s)
            while len(self._order) > OUTPUTS_KEPT:
                self._refs.pop(self._order.popleft(), None)

    def made(self, t: torch.Tensor) -> bool:
        """Whether `t` shares storage with a remembered model output."""
        if not self._refs:
            return False
        s = _storage(t)
        ref = self._refs.get(id(s)) if s is not None else None
        return ref is not None and ref() is s


def from_outside(t: torch.Tensor, outputs: Outputs) -> bool:
    """Whether `t` (a float tensor) is data: not made by a model, not a mask."""
    return not (t.requires_grad or t.grad_fn is not None or t.dtype == torch.bool or outputs.made(t))


def loss_target(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """The target of a loss call: `target=`, else the 2nd positional tensor."""
    t = kwargs.get("target") if kwargs else None
    if t is None:
        tensors = [a for a in args[:3] if isinstance(a, torch.Tensor)]
        t = tensors[1] if len(tensors) >= 2 else None
    return t if isinstance(t, torch.Tensor) else None


def wrap_loss(original: Callable, observe: Callable[[tuple, dict], None]) -> Callable:
    """A torch.nn.functional loss that first hands its arguments to `observe` (which must not raise)."""

    def loss(*args: Any, **kwargs: Any) -> Any:
        observe(args, kwargs)
        return original(*args, **kwargs)

    loss.__wrapped__ = original  # type: ignore[attr-defined]
    loss.__prepare_scriptable__ = lambda: original  # type: ignore[attr-defined]  # torch.jit.script: the original
    loss.__name__ = getattr(original, "__name__", "loss")
    loss.__doc__ = getattr(original, "__doc__", None)
    return loss

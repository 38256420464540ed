"""Architecture readers for the forward observer, on sampled steps only: normalisation layers (normprobe), loss
calls (lossprobe), attention calls (attnprobe) and residual blocks (residprobe), each read at its first call of
the step, and the model facts they reveal (model.json). Kept apart from the per-call statistics of
observer.py: these read what a layer *is* (its mode, its running statistics, the op behind a loss input, the
skip path), which only the families that judge structure need."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from neuraldbg_cli.probe import lossprobe, normprobe, residprobe
from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.records import Steps
from neuraldbg_cli.probe.roots import Root, first_float

if TYPE_CHECKING:
    from neuraldbg_cli.probe.forwardthread import ForwardThread


class ArchReader:
    """The readers; `models_changed()` is called when a model fact was learnt (a residual block, an attention
    layer)."""

    def __init__(self, steps: Steps, guard: Guard, models_changed: Callable[[], None]) -> None:
        self._steps, self._guard, self._models_changed = steps, guard, models_changed
        self._off = guard.off

    def norm(self, root: Root, name: str, module: torch.nn.Module, args: tuple) -> None:
        """A normalisation layer on a sampled step: its statistics at the first call, its mode at every call
        (a grad-enabled evaluation pass in eval mode must not hide that the training forwards ran in train mode)."""
        buf, key = self._steps.buf, (root.name, name)
        if module.training:
            buf.norm_train[key] = buf.norm_train.get(key, 0) + 1
        nkey = ("norm", *key)
        if nkey in buf.seen:
            return
        buf.seen.add(nkey)
        found = normprobe.values(module, first_float(args))
        if found is not None:
            buf.extend("norm", key, *found)

    def loss(
        self, name: str, module: torch.nn.Module | None, x: torch.Tensor | None, t: torch.Tensor | None, red: str
    ) -> None:
        """A loss call on a sampled step: its first call of the step (per loss name) is read (lossprobe)."""
        buf, key = self._steps.buf, ("loss_call", name)
        if x is None or key in buf.seen:
            return
        buf.seen.add(key)
        found = lossprobe.values(name, x, t, red, type(module).__name__ if module is not None else None)
        if found is not None:
            buf.extend("loss_call", name, *found)
            counts = lossprobe.label_counts(name, x, t)
            if counts is not None:
                buf.add("loss_counts", name, counts)

    def claim_attention(self, st: ForwardThread, module: torch.nn.Module) -> None:
        """The module whose forward made the pending attention call ends: the values are its (first per step)."""
        depth, values, lay = st.attn  # type: ignore[misc]
        if depth < st.depth:  # a module called after the attention (an output projection) ends first
            return
        st.attn = None
        root = st.root
        entry = root.observed.get(module) if root is not None else None
        name = entry[0] if type(entry) is tuple else entry
        if depth != st.depth or root is None or not isinstance(name, str):
            return
        buf, key = self._steps.buf, ("attn", root.name, name)
        if key in buf.seen:
            return
        buf.seen.add(key)
        buf.extend("attn", (root.name, name), values, lay)
        self._fact(root, "attention", name, {"type": type(module).__name__, "call": lay.source, "heads": lay.heads})

    def block(self, root: Root, name: str, module: torch.nn.Module, args: tuple, output: Any) -> None:
        """A module with children on a sampled step: a residual block when its output adds its input
        (residprobe); its first call per step is measured."""
        if not name or "residual" in self._off:
            return
        buf, key = self._steps.buf, ("resid", root.name, name)
        if key in buf.seen:
            return
        buf.seen.add(key)
        try:
            found = residprobe.values(module, first_float(args), first_float(output))
        except Exception as e:  # noqa: BLE001
            self._guard.fault("residual", e)
            return
        if found is None:
            return
        vals, lay = found
        if lay.measured:
            buf.extend("resid", (root.name, name), vals, lay)
        self._fact(root, "residual_blocks", name, {"type": lay.type, "norm": lay.norm})

    def _fact(self, root: Root, what: str, name: str, fact: dict) -> None:
        """An architecture fact for model.json (Root.facts), announced once."""
        facts = root.facts.setdefault(what, {})
        if facts.get(name) != fact:
            facts[name] = fact
            self._models_changed()

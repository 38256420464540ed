"""Which root model a top-level call trains. A root is decided once, at its first call with gradients on (or
when it is compiled), and registered (see registry); later calls only look it up. A part called alone
(`model.generator(z)`) belongs to the model that holds it, and a part added to a known model (a new head)
joins that model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe.guard import Guard
from neuraldbg_cli.probe.registry import Registry
from neuraldbg_cli.probe.roots import Root, find_owner


class Found(NamedTuple):
    root: Root
    whole: bool  # the root model itself was called, not one of its parts alone: its first argument is data


def _trainable(module: torch.nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


class RootFinder:
    """Registers roots in `reg`; `changed()` is called whenever the models' description changes."""

    def __init__(
        self, reg: Registry, changed: Callable[[], None], guard: Guard, clock: Callable[[], int] | None = None
    ) -> None:
        self._reg, self._changed, self._guard = reg, changed, guard
        self._clock = clock  # the steps completed so far (None: unknown, no absorbing: see Registry._absorb)

    def find(self, module: torch.nn.Module) -> Found | None:
        """The root a top-level call of `module` trains; None for a module that trains nothing (a frozen
        teacher, a module without parameters)."""
        hit = self._reg.lookup(module)
        if hit is not None:
            root, name = hit
            return Found(root, name == "")
        if not _trainable(module):
            return None
        owner = find_owner(module)
        known = self._reg.lookup(owner) if owner is not None else None
        if known is not None:
            root = known[0]
            self.rescan(root)
        else:
            root = self._register(owner or module)
        part = self._reg.lookup(module) if owner is not None else None  # (owner's root, its name) once joined
        _, name = part if part is not None else (root, "")
        return Found(root, name == "")

    def is_root_part(self, module: torch.nn.Module) -> bool:
        return self._reg.lookup(module) is not None

    @property
    def live(self) -> list[Root]:
        """The live root models; a model that is gone leaves (the registry still describes it)."""
        self._reg.settle()
        return self._reg.live

    def rescan(self, root: Root) -> None:
        """Parameters unfrozen or added since the model was first seen join in."""
        if self._reg.rescan(root):
            self._changed()

    def wrap_compile(self, original: Callable) -> Callable:
        """nn.Module.compile, patched: model.compile() compiles the module's own call, hooks included, so its
        forward is never seen from outside: it becomes a root at once (gradients, weights and loss are still
        observed)."""
        finder = self

        def compile(module: Any, *args: Any, **kwargs: Any) -> None:
            original(module, *args, **kwargs)
            try:
                trainable = _trainable(module)
                if finder._guard.mine() and not finder.is_root_part(module) and trainable:
                    finder._register(find_owner(module) or module)  # the whole model when a part is compiled
            except Exception as e:  # noqa: BLE001
                finder._guard.fault("forward", e)

        return compile

    def _register(self, module: torch.nn.Module) -> Root:
        root = self._reg.register(module, self._clock() if self._clock is not None else None)
        self._changed()
        return root

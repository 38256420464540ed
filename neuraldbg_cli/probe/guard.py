"""What every probe part must respect to stay out of the user's training: an exception inside neuraldbg never
reaches the script (the observation that raised is switched off and reported once, training goes on), a
forked process (a DataLoader worker inherits the hooks) observes nothing, and code that torch.compile traces
holds no neuraldbg work."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

# True while torch.compile traces: the hooks then do nothing, so the compiled graph holds no neuraldbg code
compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


class Guard:
    """`off`: the observations switched off by a fault ("forward", "grads", ...); `messages`: one per fault."""

    def __init__(self, warn: Callable[[str], None]) -> None:
        self.off: set[str] = set()
        self.messages: list[str] = []
        self._warn = warn
        self._pid = os.getpid()

    def fault(self, part: str, err: BaseException) -> None:
        """`part` raised: switch it off and say so once (a fault repeats at every call otherwise)."""
        if part in self.off:
            return
        self.off.add(part)
        msg = f"neuraldbg: internal error in {part} ({type(err).__name__}: {err}); that observation is off, training continues"
        self.messages.append(msg)
        self._warn(msg)

    def mine(self) -> bool:
        """Whether this is the process the probe was installed in (not a forked worker)."""
        return os.getpid() == self._pid

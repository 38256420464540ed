"""HookSet: every hook handle and monkeypatch neuraldbg installs, undone together (torch's
RemovableHandle discipline), so that after a run torch's global hook dicts are empty and cost nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class HookSet:
    """Owns every handle and monkeypatch; `remove()` undoes all of them, idempotently, even on error."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def add(self, handle: Any) -> None:
        self._undo.append(handle.remove)

    def on_remove(self, undo: Callable[[], None]) -> None:
        """Something to undo that has no handle (a flag that switches off what cannot be removed)."""
        self._undo.append(undo)

    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, replacement)
        self._undo.append(lambda: setattr(owner, name, original))

    def remove(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # noqa: BLE001 - keep undoing the rest
                pass

    def __enter__(self) -> HookSet:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()

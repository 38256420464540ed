"""The write guard's merged listings: what os.listdir / os.scandir show the script in a folder where it made files
(redirected into the trial's folder) or deleted some of the user's (left in place): the entries on disk less the
deleted ones, plus the redirected ones."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def entries(original: Callable[..., Any], path: Any, names: bool) -> list[Any]:
    if names:
        return list(original(path))
    with original(path) as it:
        return list(it)


def name(entry: Any) -> str:
    return entry if isinstance(entry, str) else str(entry.name)


class At:
    """A redirected folder entry shown at the path the script listed (Python 3.13's Path.glob reads entry.path)."""

    def __init__(self, entry: Any, path: str) -> None:
        self._entry, self.path = entry, path

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._entry, attr)

    def __fspath__(self) -> str:
        return self.path


class Entries:
    """What os.scandir returns (an iterator, a context manager), over a merged listing."""

    def __init__(self, entries: list[Any]) -> None:
        self._it = iter(entries)

    def __iter__(self) -> Entries:
        return self

    def __next__(self) -> Any:
        return next(self._it)

    def __enter__(self) -> Entries:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._it = iter(())

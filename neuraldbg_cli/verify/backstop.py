"""The write guard's backstop. Redirection (writeguard) patches functions where they are looked up; code that
bound one before the guard existed (a library's `from os import replace`) would slip past it. The interpreter
raises an audit event for every open, remove, rename, mkdir, truncate, utime, chmod and link, however the function was
reached: a write there to a user's path that was not redirected is refused with PermissionError (the trial then
crashes and is called inconclusive; the file is unchanged)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from neuraldbg_cli.probe.hookset import HookSet

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# audit events (CPython's audit table) through which a file's content, name or times change:
# event -> (positions of the paths it changes, positions of its dir_fd arguments); "open" is read apart
_AUDITED: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "open": ((0,), ()),
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((1,), (2, 3)),
    "os.symlink": ((1,), (2,)),
    "os.truncate": ((0,), ()),
    "os.utime": ((0,), (3,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
    "shutil.rmtree": ((0,), (1,)),
}


def install(refuses: Callable[[Any], bool], refused: list[str], hooks: HookSet) -> None:
    """Refuse, through an audit hook, any write at a path `refuses` (the write guard's judgement) names; the
    paths refused are listed in `refused`. Audit hooks cannot be removed: the hook is switched off with the
    others."""
    active = [True]

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event not in _AUDITED or not active[0]:
            return
        if event == "open":
            path, mode, flags = args
            if not (any(c in (mode or "") for c in "wax+") or (flags or 0) & WRITE_FLAGS):
                return
            paths: tuple[Any, ...] = (path,)
        else:
            where, dir_fds = _AUDITED[event]
            if any(args[i] not in (None, -1) for i in dir_fds if i < len(args)):
                return  # relative to a directory descriptor: cannot be judged (not covered, README)
            paths = tuple(args[i] for i in where)
        for p in paths:
            if refuses(p):
                refused.append(os.path.abspath(os.fsdecode(p)))
                raise PermissionError(13, "neuraldbg verify: a trial may not change the user's file", p)

    sys.addaudithook(audit)
    hooks.on_remove(lambda: active.__setitem__(0, False))

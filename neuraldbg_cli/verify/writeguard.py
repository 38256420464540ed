"""A verify trial's write guard: the re-run script must not change a file the user has. Every write the
script makes through Python (open/io.open, os.open, pathlib, numpy, torch.save, logging...) to a path outside
the trial's own folder is redirected into `<trial>/files/<absolute path>` (a file opened to append or update is
copied there first), and later reads of that path follow it, so a script that writes a checkpoint and reads it
back still works. Deleting, renaming or replacing a user's file leaves it in place (a rename copies it to the
redirected destination). New files in the temporary directory are allowed (libraries' scratch files).

Redirection patches functions where they are looked up; code that bound one before the guard existed (a
library's `from os import replace`) would slip past it: backstop.py refuses such writes. Python 3.10's pathlib
binds io.open and os.unlink into a class at import: that class is patched too.

Not covered (documented in README): native code that opens files itself (safetensors, h5py, C++ writers other
than torch.save's), writes through a directory file descriptor (dir_fd), and processes the script starts."""

from __future__ import annotations

import builtins
import io
import os
import pathlib
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.verify import backstop

_SYSTEM = ("/dev/", "/proc/")
_LINK = getattr(os, "link", None)


class WriteGuard:
    def __init__(self, home: Path) -> None:
        self.home = os.path.realpath(home)
        self.root = os.path.join(self.home, "files")
        self.tmp = os.path.realpath(tempfile.gettempdir())
        self.moved: dict[str, str] = {}  # absolute path the script used -> where it really is
        self.created: set[str] = set()  # new temporary files the script made (it may delete them)
        self.kept: list[str] = []  # users' files the script tried to delete or move: left in place
        self.refused: list[str] = []  # writes that went past every redirect: refused by the audit hook
        self._open: Callable[..., Any] = builtins.open

    # ---- where a path goes

    def allowed(self, real: str) -> bool:
        return real == self.home or real.startswith((self.home + os.sep, *_SYSTEM))

    def path(self, file: Any, write: bool, keep: bool = False) -> Any:
        """Where the script's `file` really is: itself, or its redirect (made on the first write)."""
        if isinstance(file, int) or not isinstance(file, (str, bytes, os.PathLike)):
            return file
        p = os.path.abspath(os.fsdecode(file))
        if p in self.moved:
            return self.moved[p]
        if not write:
            return file
        real = os.path.realpath(p)
        if self.allowed(real):
            return file
        if real.startswith(self.tmp + os.sep) and (p in self.created or not os.path.lexists(p)):
            self.created.add(p)
            return file
        dest = os.path.join(self.root, p.lstrip(os.sep))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if keep and os.path.isfile(p):
            with self._open(p, "rb") as src, self._open(dest, "wb") as out:
                shutil.copyfileobj(src, out)
        self.moved[p] = dest
        return dest

    def refuses(self, file: Any) -> bool:
        """A write at `file` itself (not at its redirect) would change something of the user's."""
        if isinstance(file, int) or not isinstance(file, (str, bytes, os.PathLike)):
            return False
        p = os.path.abspath(os.fsdecode(file))
        real = os.path.realpath(p)
        if self.allowed(real):
            return False
        return not (real.startswith(self.tmp + os.sep) and (p in self.created or not os.path.lexists(p)))

    def _mine(self, p: str) -> bool:
        """Whether the script may delete or move `p`: the trial's own file, a redirect, a temp file it made."""
        return p in self.moved or p in self.created or self.allowed(os.path.realpath(p))

    # ---- the patched functions

    def install(self, hooks: HookSet) -> None:
        guard = self
        real_open, os_open = builtins.open, os.open
        remove, rename, replace, rmtree = os.remove, os.rename, os.replace, shutil.rmtree

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            write = any(c in mode for c in "wax+")
            return real_open(guard.path(file, write, keep="w" not in mode), mode, *args, **kwargs)

        def os_open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("dir_fd") is not None:
                return os_open(path, flags, *args, **kwargs)
            write = bool(flags & backstop.WRITE_FLAGS)
            keep = not (flags & os.O_TRUNC and flags & os.O_CREAT)  # without O_CREAT the file must be there
            return os_open(guard.path(path, write, keep=keep), flags, *args, **kwargs)

        def remove_(path: Any, *args: Any, **kwargs: Any) -> None:
            p = os.path.abspath(os.fsdecode(path))
            if kwargs.get("dir_fd") is None and not guard._mine(p):
                guard.kept.append(p)
                return
            remove(guard.moved.pop(p, path), *args, **kwargs)

        def move(original: Callable[..., Any]) -> Callable[..., Any]:
            def moved(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
                if args or kwargs:  # dir_fd forms
                    return original(src, dst, *args, **kwargs)
                s = os.path.abspath(os.fsdecode(src))
                target = guard.path(dst, True)
                if guard._mine(s):
                    out = original(guard.moved.pop(s, src), target)
                    guard.created.discard(s)
                    return out
                guard.kept.append(s)  # a user's file: copied to the destination, left where it is
                return shutil.copyfile(s, target)

            return moved

        def rmtree_(path: Any, *args: Any, **kwargs: Any) -> None:
            p = os.path.abspath(os.fsdecode(path))
            if guard.allowed(os.path.realpath(p)) or p in guard.moved:
                return rmtree(guard.moved.get(p, path), *args, **kwargs)
            guard.kept.append(p)

        for owner in (builtins, io):
            hooks.patch(owner, "open", open_)
        hooks.patch(os, "open", os_open_)
        patched: dict[str, Callable[..., Any]] = {
            "remove": remove_,
            "unlink": remove_,
            "rename": move(rename),
            "replace": move(replace),
            "truncate": self._rewrite(os.truncate),
            "utime": self._on_own(os.utime),
            "chmod": self._on_own(os.chmod),
            "link": self._new_name(os.link),
            "symlink": self._new_name(os.symlink),
        }
        for name, fn in patched.items():
            hooks.patch(os, name, fn)
        # os.path.exists/getsize/samefile, shutil.copystat: reads see the script's writes where they went
        for name in ("stat", "lstat", "listxattr", "getxattr"):
            if name in os.__dict__:
                hooks.patch(os, name, self._follow(os.__dict__[name]))
        for name in ("setxattr", "removexattr"):
            if name in os.__dict__:
                hooks.patch(os, name, self._on_own(os.__dict__[name]))
        hooks.patch(shutil, "rmtree", rmtree_)
        accessor = getattr(pathlib, "_NormalAccessor", None)  # Python 3.10: functions bound at import
        if accessor is not None:
            for name, fn in (("open", open_), *patched.items()):
                if name in accessor.__dict__ and not callable(getattr(accessor.__dict__[name], "__get__", None)):
                    hooks.patch(accessor, name, staticmethod(fn))
        self._torch(hooks)
        backstop.install(self.refuses, self.refused, hooks)

    def _follow(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def follow(path: Any, *args: Any, **kwargs: Any) -> Any:
            if self.moved and isinstance(path, (str, bytes, os.PathLike)) and kwargs.get("dir_fd") is None:
                path = self.moved.get(os.path.abspath(os.fsdecode(path)), path)
            return original(path, *args, **kwargs)

        return follow

    def _rewrite(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.truncate(path): the user's file is copied to its redirect first, which is then truncated."""

        def rewrite(path: Any, *args: Any, **kwargs: Any) -> Any:
            return original(self.path(path, True, keep=True), *args, **kwargs)

        return rewrite

    def _on_own(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.utime / os.chmod: applied to the script's own files and redirects; on a user's file, nothing."""

        def on_own(path: Any, *args: Any, **kwargs: Any) -> Any:
            if isinstance(path, int) or kwargs.get("dir_fd") is not None:
                return original(path, *args, **kwargs)
            p = os.path.abspath(os.fsdecode(path))
            if not self._mine(p):
                self.kept.append(p)
                return None
            return original(self.moved.get(p, path), *args, **kwargs)

        return on_own

    def _new_name(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.link / os.symlink(src, dst): the new name goes where writes to it go. A hard link to a user's file
        would let a write through it change the file: the redirect gets a copy instead."""

        def new_name(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if any(kwargs.get(k) is not None for k in ("dir_fd", "src_dir_fd", "dst_dir_fd")):
                return original(src, dst, *args, **kwargs)
            target = self.path(dst, True)
            s = os.path.abspath(os.fsdecode(src))
            if original is _LINK and not self._mine(s):
                return shutil.copyfile(s, target)
            return original(self.path(src, False), target, *args, **kwargs)

        return new_name

    def _torch(self, hooks: HookSet) -> None:
        """torch.save writes a path from C++: redirected before it gets there."""
        import torch
        import torch.serialization

        original = torch.serialization.__dict__["save"]
        guard = self

        def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
            return original(obj, guard.path(f, True), *args, **kwargs)

        hooks.patch(torch, "save", save)
        hooks.patch(torch.serialization, "save", save)

    def report(self) -> dict[str, Any]:
        doc = {"redirected": dict(list(self.moved.items())[:100]), "left_in_place": self.kept[:100]}
        return doc | ({"refused": self.refused[:100]} if self.refused else {})

"""A verify trial's write guard: the re-run script must not change a file the user has. Every write the
script makes through Python (open/io.open, os.open, pathlib, numpy, torch.save, logging...) to a path outside
the trial's own folder is redirected into `<trial>/files/<absolute path>` (a file opened to append or update is
copied there first), new folders too; reads, stat and listings follow it, so a script that writes a checkpoint and
reads it back still works. Deleting, renaming or replacing a user's file leaves it in place but takes it out of
the script's view (a rename copies it to the redirected destination), so the script sees what a real disk would
show (a checkpoint saver's unlink-then-link, replace, rotation by glob). New files in the temporary directory are
allowed (libraries' scratch files), except under the script's working directory. Under an overlay (overlay.py)
the guard keeps only what lies outside the folder the overlay covers (`free`).

Redirection patches functions where they are looked up; code that bound one before the guard existed (a
library's `from os import replace`) would slip past it: backstop.py refuses such writes. Python 3.10's pathlib
binds io.open and os.unlink into a class at import: that class is patched too.

Not covered (documented in README): native code that opens files itself (safetensors, h5py, C++ writers other
than torch.save's), writes through a directory file descriptor (dir_fd), and processes the script starts."""

from __future__ import annotations

import builtins
import errno
import glob
import io
import os
import pathlib
import shutil
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neuraldbg_cli.probe.hookset import HookSet
from neuraldbg_cli.verify import backstop, listing

_SYSTEM = ("/dev/", "/proc/")
_LINK = getattr(os, "link", None)
_LSTAT, _STAT = os.lstat, os.stat  # the disk itself, not the script's view of it


def _on_disk(p: str) -> bool:
    try:
        _LSTAT(p)
    except (OSError, ValueError):
        return False
    return True


def _dir_on_disk(p: str) -> bool:
    try:
        return stat.S_ISDIR(_STAT(p).st_mode)
    except (OSError, ValueError):
        return False


class WriteGuard:
    def __init__(self, home: Path, free: list[str] | None = None) -> None:
        self.home = os.path.realpath(home)
        self.free = tuple(os.path.realpath(f) for f in free or ())  # folders an overlay keeps: written as they are
        self.root = os.path.join(self.home, "files")
        self.tmp = os.path.realpath(tempfile.gettempdir())
        self.cwd = os.path.realpath(os.getcwd())  # the user's folder, even when it lies in the temporary directory
        self.moved: dict[str, str] = {}  # absolute path the script used -> where it really is
        self.gone: set[str] = set()  # users' paths the script deleted or moved away: absent from its view
        self.created: set[str] = set()  # new temporary files the script made (it may delete them)
        self.kept: list[str] = []  # users' files the script tried to delete or move: left in place
        self.refused: list[str] = []  # writes that went past every redirect: refused by the audit hook
        self._open: Callable[..., Any] = builtins.open

    # ---- where a path goes

    def allowed(self, real: str) -> bool:
        inside = (self.home, *self.free)
        return real in inside or real.startswith((*(f.rstrip(os.sep) + os.sep for f in inside), *_SYSTEM))

    def upper(self, p: str) -> str:
        """Where a write at the absolute path `p` goes: the same path under the trial's files/ folder."""
        return os.path.join(self.root, p.lstrip(os.sep))

    def hidden(self, p: str) -> bool:
        """The user's file at `p` is absent from the script's view: it, or a folder above it, was deleted (and
        the script did not write it again)."""
        return p not in self.moved and self._dropped(p)

    def _dropped(self, p: str) -> bool:
        """`p` or a folder above it was deleted by the script (a folder made again shows only what it made)."""
        if not self.gone:
            return False
        while p not in self.gone:
            parent = os.path.dirname(p)
            if parent == p:
                return False
            p = parent
        return True

    def path(self, file: Any, write: bool, keep: bool = False) -> Any:
        """Where the script's `file` really is: itself, or its redirect (made on the first write). A deleted user's
        file reads as its redirect, which is not there."""
        if isinstance(file, int) or not isinstance(file, (str, bytes, os.PathLike)):
            return file
        p = os.path.abspath(os.fsdecode(file))
        if p in self.moved:
            return self.moved[p]
        if not write:
            return self.upper(p) if self.hidden(p) else file
        real = os.path.realpath(p)
        if self.allowed(real):
            return file
        if self._scratch(real) and (p in self.created or not _on_disk(p)):
            self.created.add(p)
            return file
        dest = self.upper(p)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        if keep and os.path.isfile(p) and not self.hidden(p):
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
        return not (self._scratch(real) and (p in self.created or not _on_disk(p)))

    def _scratch(self, real: str) -> bool:
        """In the temporary directory (libraries' scratch files), not in the user's folder."""
        return real.startswith(self.tmp + os.sep) and not real.startswith(self.cwd.rstrip(os.sep) + os.sep)

    def _mine(self, p: str) -> bool:
        """Whether the script may delete or move `p`: the trial's own file, a redirect, a temp file it made."""
        return p in self.moved or p in self.created or self.allowed(os.path.realpath(p))

    def _visible(self, p: str) -> bool:
        return _on_disk(self.path(p, False))

    def _forget(self, p: str, real_there: bool) -> None:
        """`p` (and what lies under it) left the script's view: its redirects dropped, the user's file hidden."""
        for q in [q for q in self.moved if q == p or q.startswith(p + os.sep)]:
            del self.moved[q]
        if real_there:
            self.gone.add(p)

    def _rekey(self, s: str, d: str, dest: str) -> None:
        """A redirected folder moved from `s` to `d` (now at `dest`): what lay under it moved along."""
        for q in [q for q in self.moved if q.startswith(s + os.sep)]:
            rest = q[len(s) :]
            del self.moved[q]
            self.moved[d + rest] = dest + rest

    # ---- the patched functions

    def install(self, hooks: HookSet) -> None:
        guard = self
        real_open, os_open = builtins.open, os.open
        rmtree = shutil.rmtree

        def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
            write = any(c in mode for c in "wax+")
            return real_open(guard.path(file, write, keep="w" not in mode), mode, *args, **kwargs)

        def os_open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("dir_fd") is not None:
                return os_open(path, flags, *args, **kwargs)
            write = bool(flags & backstop.WRITE_FLAGS)
            keep = not (flags & os.O_TRUNC and flags & os.O_CREAT)  # without O_CREAT the file must be there
            return os_open(guard.path(path, write, keep=keep), flags, *args, **kwargs)

        def rmtree_(path: Any, *args: Any, **kwargs: Any) -> None:
            p = os.path.abspath(os.fsdecode(path))
            if (guard.allowed(os.path.realpath(p)) and p not in guard.moved) or p in guard.created:
                guard.created.discard(p)
                return rmtree(path, *args, **kwargs)
            if not guard._visible(p):
                return rmtree(guard.upper(p), *args, **kwargs)  # not there: raises, or not (ignore_errors)
            if os.path.lexists(guard.upper(p)):
                rmtree(guard.upper(p), *args, **kwargs)
            real_there = _on_disk(p) and not guard.hidden(p)
            if real_there:
                guard.kept.append(p)
            guard._forget(p, real_there)

        for owner in (builtins, io):
            hooks.patch(owner, "open", open_)
        hooks.patch(os, "open", os_open_)
        patched: dict[str, Callable[..., Any]] = {
            "remove": self._delete(os.remove),
            "unlink": self._delete(os.unlink),
            "rmdir": self._delete(os.rmdir),
            "rename": self._move(os.rename),
            "replace": self._move(os.replace),
            "mkdir": self._mkdir(os.mkdir),
            "truncate": self._rewrite(os.truncate),
            "utime": self._on_own(os.utime),
            "chmod": self._on_own(os.chmod),
            "link": self._new_name(os.link),
            "symlink": self._new_name(os.symlink),
            "listdir": self._list(os.listdir, names=True),
            "scandir": self._list(os.scandir, names=False),
        }
        # os.path.exists/getsize/samefile, shutil.copystat: reads see the script's writes where they went
        for name in ("stat", "lstat", "listxattr", "getxattr"):
            if name in os.__dict__:
                patched[name] = self._follow(os.__dict__[name])
        for name in ("setxattr", "removexattr"):
            if name in os.__dict__:
                patched[name] = self._on_own(os.__dict__[name])
        for name, fn in patched.items():
            hooks.patch(os, name, fn)
        hooks.patch(shutil, "rmtree", rmtree_)
        accessor = getattr(pathlib, "_NormalAccessor", None)  # Python 3.10: functions bound at import
        if accessor is not None:
            for name, fn in (("open", open_), *patched.items()):
                if name in accessor.__dict__ and not callable(getattr(accessor.__dict__[name], "__get__", None)):
                    hooks.patch(accessor, name, staticmethod(fn))
        globber = getattr(glob, "_StringGlobber", None)  # Python 3.13: Path.glob's functions bound at import
        for name in ("lstat", "scandir"):
            if globber is not None and name in globber.__dict__:
                hooks.patch(globber, name, staticmethod(getattr(os, name)))
        self._torch(hooks)
        backstop.install(self.refuses, self.refused, hooks)

    @staticmethod
    def _plain(path: Any, kwargs: dict[str, Any]) -> bool:
        """A path the guard judges: not a descriptor, not relative to a directory descriptor."""
        fds = ("dir_fd", "src_dir_fd", "dst_dir_fd")
        return isinstance(path, (str, bytes, os.PathLike)) and all(kwargs.get(k) is None for k in fds)

    def _follow(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def follow(path: Any, *args: Any, **kwargs: Any) -> Any:
            if (self.moved or self.gone) and self._plain(path, kwargs):
                path = self.path(path, False)
            return original(path, *args, **kwargs)

        return follow

    def _delete(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.remove / unlink / rmdir: a redirect is deleted; a user's file is left in place and leaves the
        script's view (a second delete raises FileNotFoundError, as it would)."""

        def delete(path: Any, *args: Any, **kwargs: Any) -> Any:
            p = os.path.abspath(os.fsdecode(path)) if self._plain(path, kwargs) else ""
            if not p or (self.allowed(os.path.realpath(p)) and p not in self.moved) or p in self.created:
                self.created.discard(p)
                return original(path, *args, **kwargs)
            if not self._visible(p):
                return original(self.upper(p))  # not there: raises as it would
            redirect = self.moved.get(p)
            if redirect is not None:
                original(redirect)
            real_there = _on_disk(p) and not self.hidden(p)
            if real_there:
                self.kept.append(p)
            self._forget(p, real_there)
            return None

        return delete

    def _move(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.rename / os.replace: the script's own file moves to where writes to the destination go; a user's
        file is copied there and leaves the script's view, the original left in place."""

        def move(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if args or not self._plain(src, kwargs) or not self._plain(dst, {}):
                return original(src, dst, *args, **kwargs)
            s, d = os.path.abspath(os.fsdecode(src)), os.path.abspath(os.fsdecode(dst))
            if not self._visible(s):
                return original(self.upper(s), self.upper(d))  # not there: raises as it would
            users = not self._mine(s)
            if d not in self.moved and not self.allowed(os.path.realpath(d)) and self._visible(d):
                self._forget(d, True)  # the user's file at the destination is replaced, in the script's view
            target = self.path(dst, True)
            if users:  # copied to the destination, left where it is
                self.kept.append(s)
                (shutil.copytree if _dir_on_disk(s) else shutil.copy2)(s, target)
            else:
                self._rename(original, self.moved.pop(s, src), target)
                self.created.discard(s)
                self._rekey(s, d, os.path.abspath(os.fsdecode(target)))
            if _on_disk(s) and not self.allowed(os.path.realpath(s)):
                self._forget(s, True)
            return None

        return move

    def _mkdir(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.mkdir (and so os.makedirs, Path.mkdir): a new folder outside the trial's is made as its redirect."""

        def mkdir(path: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._plain(path, kwargs):
                return original(path, *args, **kwargs)
            p = os.path.abspath(os.fsdecode(path))
            real = os.path.realpath(p)
            if self.allowed(real) or self._scratch(real):
                if not self.allowed(real):
                    self.created.add(p)  # a temporary folder of its own: it may delete it
                return original(path, *args, **kwargs)
            if self._visible(p):
                raise FileExistsError(17, "File exists", path)
            if not self._visible(os.path.dirname(p)):
                raise FileNotFoundError(2, "No such file or directory", path)
            os.makedirs(self.upper(p), exist_ok=True)
            self.moved[p] = self.upper(p)
            return None

        return mkdir

    def _list(self, original: Callable[..., Any], names: bool) -> Callable[..., Any]:
        """os.listdir / os.scandir (and so glob, os.walk, Path.iterdir): a user's folder lists what the script
        made there, less what it deleted."""

        def merged(path: Any = ".", *args: Any, **kwargs: Any) -> Any:
            if (
                path is None
                or isinstance(path, bytes)
                or not self._plain(path, kwargs)
                or not (self.moved or self.gone)
            ):
                return original(path, *args, **kwargs)
            p = os.path.abspath(os.fsdecode(path))
            up = self.upper(p)
            if not os.path.isdir(up) and not any(g.startswith(p + os.sep) for g in self.gone):
                return original(self.path(path, False), *args, **kwargs)
            real = [] if self._dropped(p) or not _dir_on_disk(p) else listing.entries(original, path, names)
            ups = listing.entries(original, up, names) if os.path.isdir(up) else []
            if not names:
                ups = [listing.At(e, os.path.join(os.fsdecode(path), e.name)) for e in ups]
            if not real and not ups and not self._visible(p):
                return original(up)  # raises as it would
            ours = {listing.name(e) for e in ups}
            shown = [
                e for e in real if listing.name(e) not in ours and not self.hidden(os.path.join(p, listing.name(e)))
            ]
            out = [*shown, *ups]
            return out if names else listing.Entries(out)

        return merged

    def _rename(self, original: Callable[..., Any], src: Any, dst: Any) -> None:
        """Rename; under an overlay, a folder the kernel will not move (EXDEV: overlayfs in a user namespace cannot
        move a folder inside a folder the user has) is copied, then deleted, as `mv` does."""
        try:
            original(src, dst)
        except OSError as e:
            if e.errno != errno.EXDEV or not self.free or not os.path.isdir(src) or os.path.islink(src):
                raise
            shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(src)

    def _rewrite(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.truncate(path): the user's file is copied to its redirect first, which is then truncated."""

        def rewrite(path: Any, *args: Any, **kwargs: Any) -> Any:
            return original(self.path(path, True, keep=True), *args, **kwargs)

        return rewrite

    def _on_own(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.utime / os.chmod: applied to the script's own files and redirects; on a user's file, nothing."""

        def on_own(path: Any, *args: Any, **kwargs: Any) -> Any:
            if not self._plain(path, kwargs):
                return original(path, *args, **kwargs)
            p = os.path.abspath(os.fsdecode(path))
            if not self._mine(p):
                self.kept.append(p)
                return None
            return original(self.moved.get(p, path), *args, **kwargs)

        return on_own

    def _new_name(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """os.link / os.symlink(src, dst): the new name goes where writes to it go (FileExistsError when the
        script sees a file there, as it would). A hard link to a user's file would let a write through it change
        the file: the redirect gets a copy instead."""

        def new_name(src: Any, dst: Any, *args: Any, **kwargs: Any) -> Any:
            if not (self._plain(src, kwargs) and self._plain(dst, {})):
                return original(src, dst, *args, **kwargs)
            d = os.path.abspath(os.fsdecode(dst))
            if self._visible(d):
                raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
            target = self.path(dst, True)
            s = os.path.abspath(os.fsdecode(src))
            if original is _LINK and self._visible(s) and not self._mine(s):
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

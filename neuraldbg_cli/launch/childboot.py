"""The first thing a child process of an observed script runs: multiprocessing's process bootstrap wrapped so
that a child that trains is observed like a torchrun rank (children.py). Standard library only, and nothing
happens in a process that NEURALDBG_CHILD does not name: this module is imported by every spawned child
(its command line) and by the forkserver, where it must cost nothing.

Every start method ends in `BaseProcess._bootstrap` in the child, so that one function is wrapped: a fork
child inherits the wrapper, a spawn child gets it from this module on its command line before
`spawn_main`, a forkserver child from the server, which preloads this module."""

from __future__ import annotations

import importlib
import os
import sys
from multiprocessing import process
from typing import Any

ENV = "NEURALDBG_CHILD"  # JSON: where the parent's run writes and with which settings (children.child_env)
_NOT_TRAINING = ("torch.utils.data._utils.worker.",)  # DataLoader workers load data, whatever the script does

_original: Any = None


def boot() -> None:
    """Wrap the process bootstrap once, in a process whose environment names an observed parent."""
    global _original
    if _original is not None or not os.environ.get(ENV):
        return
    _original = process.BaseProcess.__dict__["_bootstrap"]
    setattr(process.BaseProcess, "_bootstrap", _bootstrap)  # noqa: B010 - a private name of multiprocessing


def unboot() -> None:
    """Undo boot() (the parent, when its script has ended)."""
    global _original
    if _original is not None:
        setattr(process.BaseProcess, "_bootstrap", _original)  # noqa: B010
        _original = None


def _bootstrap(self: Any, *args: Any, **kwargs: Any) -> Any:
    """In the child: observe it while its target runs when it may train (torch is loaded and it is not a
    DataLoader worker), else run it untouched. neuraldbg's own failures become one warning."""
    original = _original
    session = None
    target = getattr(self, "_target", None)
    where = f"{getattr(target, '__module__', '')}.{getattr(target, '__qualname__', '')}"
    if "torch" in sys.modules and not where.startswith(_NOT_TRAINING):
        try:  # by name: the session (and the probe under it) loads only in a child that may train
            children = importlib.import_module("neuraldbg_cli.launch.children")
            session = children.ChildSession.start(os.environ[ENV], where, self)
        except Exception as e:  # noqa: BLE001 - the child trains unobserved rather than not at all
            print(
                f"neuraldbg: could not observe child process {os.getpid()} ({type(e).__name__}: {e})", file=sys.stderr
            )
    else:
        _drop_inherited()
    try:
        code = original(self, *args, **kwargs)
    except BaseException:
        if session is not None:
            session.end(1)
        raise
    if session is not None:
        session.end(code)
    return code


def _drop_inherited() -> None:
    """A forked child that will not be observed still holds the parent's hooks: removed, so it runs as
    fast as without neuraldbg (a DataLoader worker calling nn.Module transforms)."""
    parent = sys.modules.get("neuraldbg_cli.launch.children")
    if parent is not None:
        parent.drop_parent_hooks()


boot()  # the forkserver imports this module by name (its preload list): its children are forked from here

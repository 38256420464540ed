"""The live-model registry: which root model each module and trainable parameter belongs to, held weakly.

A sweep, a re-built model or a replaced head drops models while the run goes on. neuraldbg must keep none of
them alive, and must never take a new object for a dead one that had the same id(). So modules are keys of
weak dictionaries, and parameters (tensors compare elementwise, so they cannot be weak-dictionary keys) are
keyed by id() with a weak reference that says which object the id meant. Deaths are noted by weakref
callbacks (which run wherever the garbage collector does) and applied at `settle()`, called before every
lookup that could see a reused id."""

from __future__ import annotations

import weakref
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from neuraldbg_cli.probe.roots import Root, rescan_root, scan_root, unwrap, user_class


class Registry:
    """Roots (every one seen, and the live ones), module -> (root, name), id(param) -> (root name, module
    name). `gen` changes whenever the parameters known change: caches built from them compare it."""

    def __init__(self, on_death: Callable[[], None] = lambda: None) -> None:
        self.roots: list[Root] = []  # every root seen: a dead one's description stays for the trace
        self.live: list[Root] = []  # replaced, never mutated (a callback may run while someone iterates it)
        self.index: weakref.WeakKeyDictionary[torch.nn.Module, tuple[Root, str]] = weakref.WeakKeyDictionary()
        self.pinfo: dict[int, tuple[str, str]] = {}  # id(param) -> (root name, module name)
        self._prefs: dict[int, tuple] = {}  # id(param) -> (ref: the parameter that id means, root, module name, numel)
        self._dead: list[tuple[str, Any]] = []  # appended by weakref callbacks, applied by settle()
        self.class_count: dict[str, int] = defaultdict(int)
        self.gen = 0
        self._on_death = on_death  # called from a weakref callback when a root model dies: assignments only

    # ---- lookups ----

    def lookup(self, module: torch.nn.Module) -> Any:
        """(root, name) of a module some live root has, else None."""
        self.settle()
        return self.index.get(module)

    def claimed(self, p: torch.nn.Parameter) -> bool:
        hit = self._prefs.get(id(p))
        return hit is not None and hit[0]() is p

    # ---- changes ----

    def register(self, module: torch.nn.Module, now: int | None = None) -> Root:
        """A new root for `module`, named by its class (`#k` for the k-th of a class). `now`: the steps completed
        so far (see _absorb)."""
        self.settle()
        wrapper, (module, wrappers) = module, unwrap(module)  # DDP(model), torch.compile(model): the model's names
        known = self.index.get(module)
        if known is not None and known[1] == "":  # a model seen before, now called through a wrapper
            self.index[wrapper] = known
            known[0].wrappers = wrappers
            return known[0]
        if now is not None:
            self._absorb(module, now)
        cls, sharded = user_class(module)
        wrappers += sharded
        k = self.class_count[cls]
        self.class_count[cls] += 1
        dead, hook, i = self._dead, self._on_death, len(self.roots)

        def on_death(_r: object) -> None:  # holds no reference to the model
            dead.append(("root", i))
            hook()

        root = Root(cls if k == 0 else f"{cls}#{k}", module, on_death)
        root.wrappers, root.cls, root.born = wrappers, cls, now
        scan_root(root, module, self.index, self._claim)
        if wrapper not in self.index:
            self.index[wrapper] = (root, "")
        self.roots.append(root)
        self.live = self.live + [root]
        self.gen += 1
        return root

    def _absorb(self, module: torch.nn.Module, now: int) -> None:
        """Live roots that are parts of `module` and were first called in this same step, no optimizer step since:
        they were called while the model was being built, before it existed as a whole (a root is decided at
        its first call with gradients on), e.g. register_parametrization's consistency check, which calls a
        spectral_norm ParametrizationList inside its constructor before it is attached to its Linear, or a
        shape probe run on a sub-network. The outermost module is the root: they are folded into it (their
        parameters and modules are freed for it to claim, and they are left out of the models described).
        A part that already trained alone (a pre-training phase: steps completed since) keeps its root."""
        inner = [
            r
            for r in self.live
            if r.born == now and (m := r.ref()) is not None and m is not module and _holds(module, m)
        ]
        for r in inner:
            r.absorbed = True
            self._bury(r)

    def rescan(self, root: Root) -> bool:
        self.settle()
        if rescan_root(root, self.index, self._claim, self.claimed):
            self.gen += 1
            return True
        return False

    def _claim(self, root: Root, name: str, p: torch.nn.Parameter) -> bool:
        if self.claimed(p):
            return False
        pid, dead = id(p), self._dead
        ref = weakref.ref(p, lambda _r: dead.append(("param", pid)))
        self._prefs[pid] = (ref, root, name, p.numel())
        self.pinfo[pid] = (root.name, name)
        root.prefs.append((name, ref))
        return True

    def settle(self) -> None:
        """Apply the deaths noted since the last call: a dead parameter's id is forgotten; a dead root
        leaves the live set, and its parameters and modules still alive become free to join another root."""
        if not self._dead:
            return
        while self._dead:
            what, key = self._dead.pop()
            if what == "param":  # a live model lost it (a replaced head): its module counts it no more
                hit = self._prefs.get(key)
                if hit is not None and hit[0]() is None:
                    del self._prefs[key]
                    self.pinfo.pop(key, None)
                    ref, root, name, numel = hit
                    if root.ref() is not None:  # a dead model's description stays as it was
                        root.n_params -= numel
                        if name in root.modules:
                            root.modules[name].params -= numel
            else:
                self._bury(self.roots[key])
        self.gen += 1

    def _bury(self, root: Root) -> None:
        self.live = [r for r in self.live if r is not root]
        for _, ref in root.prefs:
            p = ref()
            hit = self._prefs.get(id(p)) if p is not None else None
            if hit is not None and hit[0] is ref:
                del self._prefs[id(p)]
                self.pinfo.pop(id(p), None)
        root.prefs = []
        for m, (owner, _) in list(self.index.items()):
            if owner is root:
                del self.index[m]


def _holds(outer: torch.nn.Module, part: torch.nn.Module) -> bool:
    return any(m is part for m in outer.modules())

"""The sets of observed parameters the probe reads: every live root's, one optimizer's, the sparse ones.

Building a set walks every parameter, and the probe asks several times a step, so each set is cached until
the registry's generation changes (a model registered, re-scanned or gone; see registry), and an optimizer's
also until its param_groups hold other parameters."""

from __future__ import annotations

import itertools
import weakref
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.registry import Registry

# Module types whose gradient fills only the rows a batch used
SPARSE_GRADS = {"Embedding", "EmbeddingBag"}


# Between samples a dense gradient over this many elements is read through a 16K-element sample. A sample
# costs a few extra per-tensor ops outside the fused norm: below ~0.5 MB they cost more than the reading
# they save (measured: 2 * SAMPLE doubled the norm time of the transformer and the GPT; 8 * SAMPLE left it
# level there and cut the MLP's 4x)
SAMPLE_GRADS_OVER = 8 * ts.SAMPLE


class ParamSet(NamedTuple):
    params: list[torch.Tensor]
    owners: tuple[tuple[str, str], ...]  # (root name, module name) of each parameter
    ids: frozenset[int]  # id() of each, to test coverage without touching the tensors
    # what reading the gradients needs besides them, worked out once (they are read every step):
    sharded: bool = False  # some parameter is a DTensor (read through its local shard)
    big: tuple[int, ...] = ()  # parameters whose dense gradient is read off a sample between samples
    moved: tuple[int, ...] = ()  # parameters whose update sampled steps measure (see GradReader.before_update)
    # what the GradReader keeps of this set between steps (views of its weights: they die with the set)
    kept: dict[str, Any] = {}  # (EMPTY's stays empty: _make gives every set its own)


EMPTY = ParamSet([], (), frozenset())


class _ByGen(NamedTuple):
    """A cached value and the registry generation it was built at (one tuple: replaced in one assignment)."""

    gen: int
    value: Any


class _ByOptimizer(NamedTuple):
    signature: tuple[int, ...]  # id() of every parameter in the optimizer's param_groups, in order
    gen: int
    params: ParamSet


class ParamSets:
    """Observed (trainable, claimed by a root) parameters, with their owners and ids."""

    def __init__(self, reg: Registry) -> None:
        self._reg = reg
        self._every = _ByGen(-1, EMPTY)
        self._sparse = _ByGen(-1, frozenset())
        self._of: weakref.WeakKeyDictionary[Any, _ByOptimizer] = weakref.WeakKeyDictionary()  # dies with its optimizer

    def every(self) -> ParamSet:
        """Every live root's trainable parameters."""
        reg = self._reg
        reg.settle()
        if self._every.gen != reg.gen:
            self.forget()  # let go first: a parameter only this cache held dies now, and settle() notes it
            reg.settle()
            params = [p for root in reg.live for _, p in root.params]
            self._every = _ByGen(reg.gen, self._make(params))
        return self._every.value

    def of_optimizer(self, opt: torch.optim.Optimizer) -> ParamSet:
        """The observed parameters among an optimizer's, in its param_groups' order."""
        signature = tuple(map(id, itertools.chain.from_iterable(g["params"] for g in opt.param_groups)))
        reg = self._reg
        reg.settle()
        hit = self._of.get(opt)
        if hit is None or hit.signature != signature or hit.gen != reg.gen:
            params = [p for g in opt.param_groups for p in g["params"] if reg.claimed(p)]
            hit = self._of[opt] = _ByOptimizer(signature, reg.gen, self._make(params))
        return hit.params

    def sparse(self) -> frozenset[int]:
        """Ids of parameters whose gradient fills only a few rows (embeddings): a sample of such a gradient
        could miss every row of the batch and read as no gradient at all, so they are always read whole."""
        reg = self._reg
        reg.settle()
        if self._sparse.gen != reg.gen:
            self._sparse = _ByGen(
                reg.gen,
                frozenset(
                    id(p)
                    for r in reg.live
                    for name, p in r.params
                    if name in r.modules and r.modules[name].type in SPARSE_GRADS
                ),
            )
        return self._sparse.value

    def forget(self) -> None:
        """Drop the set of every parameter, so that nothing here keeps a dead model's memory (called from a
        weakref callback too: one plain assignment)."""
        self._every = _ByGen(-1, EMPTY)

    def _make(self, params: list) -> ParamSet:
        pinfo, sparse = self._reg.pinfo, self.sparse()
        big = tuple(i for i, p in enumerate(params) if p.numel() > SAMPLE_GRADS_OVER and id(p) not in sparse)
        # a large sparse-gradient parameter (an embedding) is left out of the update: a sample could miss every
        # row a step moved; so is a shard this process holds nothing of
        moved = tuple(
            i for i, p in enumerate(params) if (p.numel() <= 2 * ts.SAMPLE or id(p) not in sparse) and ts.holds(p)
        )
        owners = tuple(pinfo[id(p)] for p in params)
        sharded = any(map(ts.is_sharded, params))
        return ParamSet(params, owners, frozenset(map(id, params)), sharded, big, moved, {})

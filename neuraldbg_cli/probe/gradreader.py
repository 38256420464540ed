"""What the parameters say about a step: gradient norms, weight norms, checksums and update norms, as 0-d
device tensors added to the step's buffer (they go to the host with the step's other values, see records).

Gradients are read once per parameter and step (`StepBuffer.covered`), in one fused norm per call. Of a
sharded (DTensor) parameter only the local shard is read, with no collective: tensorstats.local_parts
gives the factor that takes a shard's norm to the whole tensor's."""

from __future__ import annotations

import math
import operator
from typing import NamedTuple

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.paramsets import SAMPLE_GRADS_OVER, ParamSet, ParamSets
from neuraldbg_cli.probe.records import StepBuffer


class UpdateBefore(NamedTuple):
    """What `GradReader.before_update` keeps of a sampled optimizer step, for `update` after it."""

    buf: StepBuffer  # the step it belongs to
    ps: ParamSet
    views: list[torch.Tensor]  # the sample views the copies were taken from
    samples: list[torch.Tensor]  # fp32 copies of an even sample of each parameter (ParamSet.moved)
    grads: list[torch.Tensor | None] | None = None  # a manual update's: its gradient at the same sample positions


class _Samples(NamedTuple):
    """Sample views of a set's `moved` weights (kept in ParamSet.kept while each keeps its storage)."""

    ptrs: list[int]  # data_ptr() of each weight when its view was made
    views: list[torch.Tensor]
    owners: tuple
    scale: list[float] | None  # per view, the factor from the sample's norm to the whole tensor's; None: all 1


_STRIDED = torch.strided
_DENSE = {torch.strided}
_GRAD, _LAYOUT = operator.attrgetter("grad"), operator.attrgetter("layout")


# a sparse COO gradient (nn.Embedding/EmbeddingBag(sparse=True), trained by SparseAdam or SGD) holds the rows
# the batch touched: its norm is the norm of its coalesced values (repeated indices summed first)
_READABLE = {torch.strided, torch.sparse_coo}


def _dense_part(g: torch.Tensor) -> torch.Tensor:
    """The values whose norm is the gradient's: the tensor itself, or a sparse one's coalesced values."""
    return g if g.layout is _STRIDED else g.coalesce().values()


class _BitViews(NamedTuple):
    ptrs: list[int]  # data_ptr() of each weight when its views were made
    views: list[torch.Tensor | None]


class GradReader:
    """Reads the parameters of `sets` into step buffers; holds only integer views of the weights."""

    def __init__(self, sets: ParamSets) -> None:
        self._sets = sets
        self._views = _BitViews([], [])

    def norms(self, buf: StepBuffer, ps: ParamSet) -> None:
        """One fused norm over the gradients present that this step has not read yet; a parameter without a
        .grad is simply absent, a sparse one is read from its values (_dense_part). Between samples a big dense
        gradient's RMS is read off an even sample of it (tensorstats.sample), scaled to the whole tensor. Runs
        every step: the usual case (every gradient there, none read yet, nothing sharded) takes the short way,
        with what depends only on the parameters (which are big, whether any is sharded) worked out when the set
        was built."""
        params, owners = ps.params, ps.owners
        grads: list = list(map(_GRAD, params))  # (map and set: no Python frame per parameter, every step)
        try:
            dense = set(map(_LAYOUT, grads)) == _DENSE
        except AttributeError:  # a parameter without a gradient (None)
            dense = False
        if dense and buf.covered.isdisjoint(ps.ids):
            if not ps.sharded:
                buf.covered.update(ps.ids)
                scale = None
                if ps.big and not buf.sampled:
                    grads, scale = list(grads), [1.0] * len(grads)
                    for i in ps.big:
                        if grads[i].is_contiguous():
                            part = ts.sample(grads[i].view(-1))
                            scale[i] = math.sqrt(grads[i].numel() / part.numel())
                            grads[i] = part
                with torch.no_grad():
                    buf.add("grad", owners, ts.norm_vector(grads), scale)
                return
        if not buf.covered.isdisjoint(ps.ids) or not dense:
            keep = [
                i
                for i, (p, g) in enumerate(zip(params, grads))
                if g is not None and g.layout in _READABLE and id(p) not in buf.covered
            ]
            params, owners = [params[i] for i in keep], tuple(owners[i] for i in keep)
            grads = [_dense_part(grads[i]) for i in keep]
        buf.covered.update(ps.ids)
        if not grads:
            return
        grads, scale = ts.local_parts(grads)
        if not buf.sampled:
            sparse = self._sets.sparse()
            big = [
                i
                for i, (p, g) in enumerate(zip(params, grads))
                if g.numel() > SAMPLE_GRADS_OVER and g.is_contiguous() and id(p) not in sparse
            ]
            if big:
                grads, scale = list(grads), scale or [1.0] * len(grads)
                for i in big:
                    part = ts.sample(grads[i].view(-1))
                    scale[i] *= math.sqrt(grads[i].numel() / part.numel())
                    grads[i] = part
        with torch.no_grad():
            norms = ts.norms(grads)
        buf.extend("grad", owners, list(norms), scale)

    def step_stats(self, buf: StepBuffer) -> None:
        """At the end of a step: the gradients no optimizer step read (parameters in no optimizer, a
        backward-counted step), and on sampled steps every weight's norm and checksum (whether it moved)."""
        ps = self._sets.every()
        if (
            not buf.scaled and not ps.ids <= buf.covered
        ):  # outside an optimizer step, a GradScaler's gradients are still scaled
            self.norms(buf, ps)
        if buf.sampled and ps.params:
            parts, shard_scale = ts.local_parts(ps.params)
            with torch.no_grad():
                norms = ts.norm_vector(parts)
                sums = ts.checksums(self._bit_views(ps.params))
            buf.add("weight", ps.owners, norms, shard_scale)
            if isinstance(sums, torch.Tensor):
                buf.add("checksum", ps.owners, sums)
            else:
                buf.extend("checksum", ps.owners, sums)

    def before_update(self, buf: StepBuffer, ps: ParamSet) -> UpdateBefore:
        """Update-to-weight ratio, the usual evidence of a too large learning rate (healthy around 1e-3): the
        norm of the change one optimizer step makes, measured on sampled steps. Before the step: an fp32 copy
        of an even sample of each parameter (tensorstats.sample: whole when small); `update` subtracts it from
        the same sample after the step and scales the norm to the whole tensor as a gradient sample's is. Large
        sparse-gradient parameters (embeddings) are left out (ParamSet.moved)."""
        with torch.no_grad():  # of a sharded parameter, the local shard: the scale in `update` takes it to the whole
            views = self._samples(ps).views
            if views and all(v.dtype is torch.float32 for v in views):
                samples = list(torch._foreach_mul(views, 1.0))  # fp32 copies in one call (x * 1.0 is x exactly)
            else:
                samples = [v.to(torch.float32, copy=True) for v in views]
        return UpdateBefore(buf, ps, views, samples)

    def before_manual(self, buf: StepBuffer, ps: ParamSet) -> UpdateBefore:
        """A backward-counted step (no optimizer): the script updates the weights itself after backward()
        (`p -= lr * p.grad`) and the step closes at its next pass or zero_grad. As before_update, plus the gradient
        at the same sample positions, copied now (a script may zero it in place before the step closes): `update`
        then measures the update's direction against the gradient too (an ascent, `p += lr * p.grad`, moves
        along it)."""
        before = self.before_update(buf, ps)
        params = [ps.params[i] for i in ps.moved]
        grads: list[torch.Tensor | None] = []
        with torch.no_grad():
            for p in params:
                g = p.grad
                if g is None or g.layout is not _STRIDED or g.shape != p.shape or ps.sharded:
                    grads.append(None)
                else:
                    grads.append(ts.sample(g.detach().reshape(-1)).to(torch.float32, copy=True))
        return before._replace(grads=grads)

    def kept_grads(self, buf: StepBuffer, before: UpdateBefore) -> None:
        """A backward pass begins after a sampled backward-counted step (before_manual): whether every gradient read
        then is still there, bit for bit and not all zeros, while the weights moved since (the script updated them
        and zeroed nothing: `w.grad.zero_()` left out, so autograd adds this pass to the last). Weights that did not
        move are micro-batches accumulated on purpose. One 0-d value (`manual_kept`), no sync."""
        grads = before.grads
        if grads is None:
            return
        params = [before.ps.params[i] for i in before.ps.moved]
        views = self._samples(before.ps).views
        kept, moved = [], []
        with torch.no_grad():
            for p, g0, w0, v in zip(params, grads, before.samples, views):
                if g0 is None or v.shape != w0.shape:
                    continue
                g = p.grad
                if g is None or g.layout is not _STRIDED or g.shape != p.shape:
                    return  # cleared (set to None): zeroed
                now = ts.sample(g.detach().reshape(-1))
                kept.append(torch.logical_and((now.float() == g0).all(), (g0 != 0).any()))
                moved.append((v.float() != w0).any())
            if not kept:
                return
            value = torch.logical_and(torch.stack(kept).all(), torch.stack(moved).any()).float()
        buf.add("manual_kept", None, value)

    def update(self, before: UpdateBefore) -> None:
        """After the optimizer step (or a manual update: before_manual): see before_update. With the gradient
        kept, also each parameter's update dotted with it (`update_dot`, scaled to the whole tensor as a squared
        norm is): negative for a descent, positive for an ascent."""
        found = self._samples(before.ps)
        scale, owners, samples, grads = found.scale, found.owners, before.samples, before.grads
        with torch.no_grad():
            after = [v if v.dtype is torch.float32 else v.float() for v in found.views]
            if found.views is not before.views:  # a weight got new storage during the step (`p.data = ...`)
                keep = [i for i, (a, b) in enumerate(zip(after, samples)) if a.shape == b.shape]
                after, samples = [after[i] for i in keep], [samples[i] for i in keep]
                owners = tuple(owners[i] for i in keep)
                scale = [scale[i] for i in keep] if scale is not None else None
                grads = [grads[i] for i in keep] if grads is not None else None
            if not after:
                return
            diffs = list(torch._foreach_sub(after, samples))
            norms = ts.norm_vector(diffs)
            dots = None
            if grads is not None:
                pairs = [i for i, (d, g) in enumerate(zip(diffs, grads)) if g is not None and g.shape == d.shape]
                if pairs:
                    dots = [(diffs[i] * grads[i]).sum() for i in pairs]  # type: ignore[operator]
        before.buf.add("update", owners, norms, scale)
        if dots is not None:
            squared = [scale[i] ** 2 for i in pairs] if scale is not None else None
            before.buf.extend("update_dot", tuple(owners[i] for i in pairs), dots, squared)

    def forget(self) -> None:
        """Drop the weights' views (a model died: nothing here may keep its memory; a weakref callback calls
        this too, so one plain assignment)."""
        self._views = _BitViews([], [])

    def _samples(self, ps: ParamSet) -> _Samples:
        """tensorstats.sample() views of each `moved` weight's local part, kept in the set while every weight keeps
        its storage (an optimizer updates in place; building a view costs several ops per parameter, on every
        sampled step)."""
        params = ps.params
        ptrs = [params[i].data_ptr() for i in ps.moved]
        found = ps.kept.get("samples")
        if found is None or found.ptrs != ptrs:
            kept = [params[i] for i in ps.moved]
            views = [ts.sample(ts.local(p).detach().reshape(-1)) for p in kept]
            scale = [math.sqrt(p.numel() / v.numel()) for p, v in zip(kept, views)]
            owners = tuple(ps.owners[i] for i in ps.moved)
            found = ps.kept["samples"] = _Samples(ptrs, views, owners, scale if any(f != 1.0 for f in scale) else None)
        return found

    def _bit_views(self, params: list) -> list[torch.Tensor | None]:
        """ts.bit_views() of every weight, kept while each weight keeps its storage (building them costs
        ops per parameter; `p.data = ...` gives a weight new storage, and new views)."""
        ptrs = [p.data_ptr() for p in params]
        if self._views.ptrs != ptrs:
            self._views = _BitViews(ptrs, ts.bit_views(params))
        return self._views.views

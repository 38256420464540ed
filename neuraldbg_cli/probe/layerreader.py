"""What a trained root's forward pass says, on the forward observer's behalf: per layer the statistics of its
output and of the activation after it, and the data a model or a loss is given (see provenance). The observer
decides which call is what (the dispatch); this reads the tensors it is handed.

Unsampled steps keep a 0-d sum per output where a NaN could be made (a NaN/Inf anywhere makes it non-finite,
so a NaN is never missed); sampled steps add full statistics (tensorstats.full) of the first call of each
site."""

from __future__ import annotations

from typing import Any

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.archreader import ArchReader
from neuraldbg_cli.probe.forwardthread import ForwardThread
from neuraldbg_cli.probe.provenance import Outputs, Sites, from_outside
from neuraldbg_cli.probe.records import Steps
from neuraldbg_cli.probe.roots import OTHER, PARAMS, SAFE, Root, first_float
from neuraldbg_cli.probe.tensorstats import CHEAP_ONLY, DEAD, EXACT, SAT

_STRIDED = torch.strided


class LayerReader:
    """The statistics side of the forward hooks: outputs, activations, inputs and targets."""

    def __init__(self, steps: Steps, arch: ArchReader, outputs: Outputs) -> None:
        self._steps, self._arch, self._outputs = steps, arch, outputs
        self.made_step = -1  # the last step in which a model ran that this forward does not train (_other_output)
        self._sites = Sites()  # the call site that gives each data site its statistics (see provenance)

    # ---- data ----

    def observe_target(self, t: torch.Tensor | None) -> None:
        """A loss's target, when it is data (a teacher's prediction or a mask is not). Nor is a target computed
        in a step in which a model ran outside training (under no_grad, or frozen): a DQN's r + gamma * max
        Q_target(s'), a critic's bootstrapped return, a teacher's sharpened output are made from that output
        by arithmetic, in storage of their own, and move as the model learns, by design."""
        if self.made_step == self._steps.step:
            return
        if t is not None and t.is_floating_point() and t.numel() > 0 and from_outside(t, self._outputs):
            self.observe_data(("", "", "target"), t)

    def observe_data(self, key: tuple, x: torch.Tensor) -> None:
        steps = self._steps
        if steps.buf.sampled and self._sites.canonical(key, steps.step):
            self._add_once(key, x, EXACT)
        else:
            steps.buf.watch(key, x)

    # ---- layers ----

    def observe_output(
        self, st: ForwardThread, root: Root, module: torch.nn.Module, entry: tuple, args: tuple, output: Any
    ) -> None:
        """Activations are attributed to the layer they follow (the last module with parameters), so a
        shared `self.act` or a functional F.relu (after a Dropout too) still points at the layer whose units are
        dead."""
        name, flags, kind, out_key = entry
        buf = self._steps.buf
        layer, prev_out = st.layer, st.out
        # the tensor entering a layer: a functional activation's output (not for a normalisation layer: what
        # enters it is the residual stream, not an activation; not for a module with children, the root model
        # included: its hook runs after them, on its own inputs)
        if kind == PARAMS and buf.sampled and layer is not None and not flags & CHEAP_ONLY:
            x = first_float(args) if next(iter(module.children()), None) is None else None
            if x is not None and x is not prev_out and x.numel() > 0:  # its units: where this layer reads them
                axis = ts.unit_axis_flags(type(module).__name__)
                self._add_once((root.name, layer, "activation"), x, DEAD | SAT | axis)
        if isinstance(output, torch.Tensor):  # (first_float's usual case inline: every module, every step)
            t = output if output.is_floating_point() and output.layout is _STRIDED else None
        else:
            t = first_float(output)
        act = flags & (DEAD | SAT)  # an activation function
        if t is not None and t.numel() > 0 and (act or t is not prev_out):  # in-place activations: same tensor
            key = (root.name, layer, "activation") if act and layer is not None else out_key
            if (kind == PARAMS and not flags & CHEAP_ONLY) or (act and buf.sampled):
                if buf.sampled:  # an activation's units lie where the layer it follows puts them
                    axis = ts.unit_axis_flags(getattr(root.modules.get(layer), "type", None)) if act and layer else 0
                    self._add_once(key, t, flags | axis)
                else:  # (what _add_once does between samples, without the calls: every module, every step)
                    buf.watch(key, t)
            elif kind == OTHER or prev_out is None or first_float(args) is not prev_out:
                buf.watch(key, t)  # no statistics of its own, but a NaN made here is seen here
            # else: finite-preserving and fed the output just checked, so no NaN can start here. Also a
            # normalisation layer: its weights turn NaN through a gradient (checked every step) or a broken
            # optimizer update, which then shows at the next layer's check
        if flags & CHEAP_ONLY and buf.sampled:
            self._arch.norm(root, name, module, args)
        if kind == PARAMS and buf.sampled and next(iter(module.children()), None) is not None:
            self._arch.block(root, name, module, args, output)  # a block with parameters of its own (ReZero)
        # activations keep the layer's name, and so do modules that pass its units on (Dropout, pooling, Flatten,
        # Identity: finite-preserving), so an F.relu after a Dropout still names the layer whose units are dead
        st.layer = name if kind == PARAMS or not (act or kind == SAFE) else layer
        st.out = t
        if name not in root._ordered:  # the order layers first ran in, for the trace
            root._ordered.add(name)
            root.order.append(name)

    def observe_container(
        self, st: ForwardThread, root: Root, name: str, module: torch.nn.Module, args: tuple, output: Any
    ) -> None:
        if self._steps.buf.sampled:
            self._arch.block(root, name, module, args, output)
        t = first_float(output)
        if t is not None and t is not st.out and t.numel() > 0:  # a Sequential just passes its last output
            self._steps.buf.watch((root.name, name, "output"), t)
        if name not in root._ordered:
            root._ordered.add(name)
            root.order.append(name)

    def _add_once(self, key: tuple, x: torch.Tensor, flags: int) -> None:
        """Full statistics for the first call of a site per sampled step; the cheap check otherwise."""
        buf = self._steps.buf
        if buf.sampled and key not in buf.seen and not flags & CHEAP_ONLY:
            buf.seen.add(key)
            values, lay = ts.full(x, flags)
            buf.add_full(key, values, lay, x)
        else:
            buf.watch(key, x)

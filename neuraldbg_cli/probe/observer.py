"""Forward passes: which root model a top-level call trains (rootfinder), what is data (a model's first
argument, a loss's target: see provenance), and per layer the statistics of its output and of the
activation after it.

Unsampled steps keep a 0-d sum per output where a NaN could be made (a NaN/Inf anywhere makes it
non-finite, so a NaN is never missed); sampled steps add full statistics (tensorstats.full) of the first
call of each site. Forward passes with gradients disabled (validation, inference) are not observed.

DataParallel runs its replicas' forwards in worker threads, so the nesting depth, the current root and the
previous output belong to a thread. A thread whose call begins, gradients on, while another thread's call
of a trained root is under way is part of that call: a replica (a copy no root holds) is part of the
DataParallel call, not a new model. Other threads' calls are their own (a background evaluation)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.nn.modules.loss import _Loss

from neuraldbg_cli.probe import attnprobe, lossprobe
from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.probe.archreader import ArchReader
from neuraldbg_cli.probe.guard import Guard, compiling
from neuraldbg_cli.probe.provenance import Outputs, Sites, first_tensor, from_outside, loss_target
from neuraldbg_cli.probe.records import Steps
from neuraldbg_cli.probe.rootfinder import RootFinder
from neuraldbg_cli.probe.roots import OTHER, PARAMS, SAFE, Root, first_float
from neuraldbg_cli.probe.tensorstats import CHEAP_ONLY, DEAD, EXACT, SAT

_STRIDED = torch.strided
# torch's global module hook dicts (what `_has_any_global_hook` reads)
_GLOBAL_MODULE_HOOKS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)


class _Thread:
    """One thread's place in the forward pass."""

    __slots__ = ("depth", "base", "root", "layer", "out", "attn")

    def __init__(self) -> None:
        self.depth = 0  # module calls under way in this thread
        self.base = 0  # 1 in a thread that joined another thread's call (its calls end there), else 0
        self.root: Root | None = None  # the trained root whose forward this is
        self.layer: str | None = None  # the last layer with parameters seen: an activation is attributed to it
        self.out: torch.Tensor | None = None  # the last output seen
        self.attn: tuple | None = None  # sampled steps: (depth, values, layout) of an attention call to attribute


class ForwardObserver:
    """The bodies of the global forward hooks and of the torch.nn.functional loss wrappers. `begin()` is
    called when a trained root's call begins (a backward-counted step closes there, see StepClock.due)."""

    def __init__(
        self,
        steps: Steps,
        finder: RootFinder,
        guard: Guard,
        begin: Callable[[], None],
        models_changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._steps, self._finder, self._guard, self._begin = steps, finder, guard, begin
        self._arch = ArchReader(steps, guard, models_changed)  # what layers are: norms, losses, attention, blocks
        self._off = guard.off  # (the same set: read at every module call)
        self._outputs = Outputs()  # storages of recent model outputs: never data (see provenance)
        self._made_step = -1  # the last step in which a model ran that this forward does not train (_other_output)
        self._sites = Sites()  # the call site that gives each data site its statistics (see provenance)
        self.losses_on = False  # install() to removal: `from torch.nn.functional import mse_loss` keeps our wrapper
        self._local = threading.local()
        self._holder: _Thread | None = None  # the first thread whose top-level call is under way

    def _thread(self) -> _Thread:
        """This thread's state (the hooks inline the lookup: they run at every module call)."""
        try:
            return self._local.state
        except AttributeError:
            st = self._local.state = _Thread()
            return st

    # ---- hooks ----

    def pre_forward(self, module: torch.nn.Module, args: tuple) -> None:
        if compiling():  # traced by torch.compile: stay out of the graph (no recompiles, no graph breaks)
            return
        try:
            st = self._local.state
        except AttributeError:
            st = self._thread()
        if st.depth == 0:
            holder = self._holder
            if holder is None:
                self._holder = st
            elif holder is not st and holder.root is not None and self._training():  # a replica's worker thread
                st.depth = st.base = 1
                st.root = holder.root
        st.depth += 1
        if st.depth != 1 or "forward" in self._off:
            return
        try:
            self.enter_root(module, args)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("forward", e)

    def post_forward(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if compiling():
            return
        try:
            st = self._local.state
        except AttributeError:
            st = self._thread()
        if st.attn is not None:  # (sampled steps only) an attention call made inside this module's forward
            try:
                self._arch.claim_attention(st, module)
            except Exception as e:  # noqa: BLE001
                st.attn = None
                self._guard.fault("attention", e)
        depth = st.depth - 1
        st.depth = depth if depth > 0 else 0
        root = st.root
        if "forward" not in self._off:
            try:
                entry = root.observed.get(module) if root is not None else None
                if type(entry) is tuple:
                    self._observe_output(st, root, module, entry, args, output)
                elif entry is not None:
                    self._observe_container(st, root, entry, module, args, output)
                if st.depth == 0:
                    if root is not None:
                        self._outputs.add(output)  # a model's output is never data
                    else:
                        self._other_output(module, args, output)
            except Exception as e:  # noqa: BLE001
                self._guard.fault("forward", e)
        if st.depth <= st.base:  # this thread's outermost call ended
            if self._holder is st:
                self._holder = None
            st.depth = st.base = 0
            st.root = st.layer = st.out = st.attn = None

    def loss_call(self, name: str, args: tuple, kwargs: dict) -> None:
        """The torch.nn.functional loss `name` called by the script. Inside a module it is observed only as a
        class loss that a trained model computes in its own forward (nanoGPT, Hugging Face models), on sampled
        steps, for the loss-call probe: a loss module was observed at its call, and a target read inside a
        model is no data the script gave."""
        if compiling() or not self.losses_on or "forward" in self._off:
            return  # (torch.compile first: traced, it reads no attribute of ours, so it guards on none)
        st = self._thread()
        if st.depth:
            if st.root is not None and name in lossprobe.CLASS_LOSSES and self._steps.buf.sampled:
                try:
                    reduction = kwargs.get("reduction", "mean") if kwargs else "mean"
                    target = loss_target(args, kwargs)
                    self._arch.loss(name, None, lossprobe.loss_input(args, kwargs), target, reduction)
                except Exception as e:  # noqa: BLE001
                    self._guard.fault("forward", e)
            return
        try:
            extra = name in lossprobe.EXTRA_LOSSES  # wrapped for the loss-call probe only (sampled steps)
            sampled = self._steps.buf.sampled
            if (sampled or not extra) and self._training():
                target = loss_target(args, kwargs)
                if not extra:  # a float target: data (a class loss's soft labels are not)
                    self._observe_target(target)
                if sampled:
                    reduction = kwargs.get("reduction", "mean") if kwargs else "mean"
                    self._arch.loss(name, None, lossprobe.loss_input(args, kwargs), target, reduction)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("forward", e)

    def attention_call(self, source: str, args: tuple, kwargs: dict) -> None:
        """F.scaled_dot_product_attention ("sdpa") or F.multi_head_attention_forward ("mha") called inside a
        trained root's forward. On sampled steps its first call in a module is recomputed for a few rows
        (attnprobe) and attributed to the module it was called in, when that module's forward ends."""
        if compiling() or not self.losses_on or not self._steps.buf.sampled:
            return  # (torch.compile first: a flag read while tracing becomes a guard, and a recompile when it flips)
        off = self._off
        if "forward" in off or "attention" in off:
            return
        try:
            st = self._thread()
            if st.root is None or st.depth == 0 or st.attn is not None or not self._training():
                return
            found = (attnprobe.sdpa_values if source == "sdpa" else attnprobe.mha_values)(args, kwargs)
            if found is not None:
                st.attn = (st.depth, *found)
        except Exception as e:  # noqa: BLE001
            self._guard.fault("attention", e)

    def foreign_hooks(self) -> bool:
        """Stands in for torch's `_has_any_global_hook`, used (only) by torch.compile(model)'s warning that
        global hooks fire an extra time on its wrapper. Ours handle the wrapper, so only other hooks count."""
        hooks = [h for name in _GLOBAL_MODULE_HOOKS for h in getattr(_module, name, {}).values()]
        return any(getattr(h, "__self__", None) is not self for h in hooks)

    # ---- a top-level call ----

    def enter_root(self, module: torch.nn.Module, args: tuple) -> None:
        st = self._thread()
        st.root = None
        if not self._training():
            return
        if isinstance(module, _Loss) and not self._finder.is_root_part(module):
            target = loss_target(args, {})
            self._observe_target(target)
            if self._steps.buf.sampled:
                name = lossprobe.module_loss(module)
                if name is not None:
                    x = lossprobe.loss_input(args, {})
                    self._arch.loss(name, module, x, target, str(getattr(module, "reduction", "mean")))
            return
        found = self._finder.find(module)
        if found is None:
            return
        self._begin()
        if self._steps.buf.held:  # the last forward's outputs saw no loss (two forwards, one loss; a skipped NaN)
            self._steps.buf.settle(False)
        st.root, st.layer, st.out = found.root, None, None
        self._steps.buf.active.add(found.root.name)
        if found.whole:
            x = first_tensor(args)  # by position: `model(tokens, hidden)` has int64 data, and no float statistics
            if x is not None and x.is_floating_point() and x.numel() > 0:
                if from_outside(x, self._outputs):
                    self._observe_data((found.root.name, "", "input"), x)
                elif x.requires_grad and not self._outputs.made(x):
                    self._steps.buf.input_grad = True

    def _training(self) -> bool:
        """Whether a forward now can be training: gradients on, in this process, and no torch.func
        transform under way (its tensors must not escape)."""
        grad_on = torch.is_grad_enabled() and not torch.is_inference_mode_enabled()
        return grad_on and self._guard.mine() and not torch._C._are_functorch_transforms_active()

    def _other_output(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        """A top-level call that trains no root. A module with parameters is a model (a frozen teacher, a
        generator sampling under no_grad): its output is not data. One without parameters that returns a
        scalar needing a gradient is a loss (custom losses subclass nn.Module): its 2nd argument is a target."""
        if not self._guard.mine() or torch._C._are_functorch_transforms_active():
            return
        if next(module.parameters(), None) is not None:
            self._outputs.add(output)
            self._made_step = self._steps.step
        elif isinstance(output, torch.Tensor) and output.dim() == 0 and output.requires_grad:
            if not isinstance(module, _Loss) and self._training():
                self._observe_target(loss_target(args, {}))

    # ---- data ----

    def _observe_target(self, t: torch.Tensor | None) -> None:
        """A loss's target, when it is data (a teacher's prediction or a mask is not). Nor is a target computed
        in a step in which a model ran outside training (under no_grad, or frozen): a DQN's r + gamma * max
        Q_target(s'), a critic's bootstrapped return, a teacher's sharpened output are made from that output
        by arithmetic, in storage of their own, and move as the model learns, by design."""
        if self._made_step == self._steps.step:
            return
        if t is not None and t.is_floating_point() and t.numel() > 0 and from_outside(t, self._outputs):
            self._observe_data(("", "", "target"), t)

    def _observe_data(self, key: tuple, x: torch.Tensor) -> None:
        steps = self._steps
        if steps.buf.sampled and self._sites.canonical(key, steps.step):
            self._add_once(key, x, EXACT)
        else:
            steps.buf.watch(key, x)

    # ---- layers ----

    def _observe_output(
        self, st: _Thread, root: Root, module: torch.nn.Module, entry: tuple, args: tuple, output: Any
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

    def _observe_container(
        self, st: _Thread, root: Root, name: str, module: torch.nn.Module, args: tuple, output: Any
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

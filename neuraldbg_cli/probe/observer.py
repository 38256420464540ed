"""Forward passes, dispatched: which root model a top-level call trains (rootfinder), which call is a loss,
an attention call or another model's, and which layer an output belongs to; the tensors go to the readers
(layerreader: layer statistics and data; archreader: what layers are). Forward passes with gradients disabled
(validation, inference) are not observed.

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
from neuraldbg_cli.probe.archreader import ArchReader
from neuraldbg_cli.probe.forwardthread import ForwardThread
from neuraldbg_cli.probe.guard import Guard, compiling
from neuraldbg_cli.probe.layerreader import LayerReader
from neuraldbg_cli.probe.provenance import Outputs, first_tensor, from_outside, loss_target
from neuraldbg_cli.probe.records import Steps
from neuraldbg_cli.probe.rootfinder import RootFinder

# torch's global module hook dicts (what `_has_any_global_hook` reads)
_GLOBAL_MODULE_HOOKS = (
    "_global_forward_pre_hooks",
    "_global_forward_hooks",
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
)


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
        self._layers = LayerReader(steps, self._arch, self._outputs)
        # bound once: the forward hook calls them at every module call
        self._observe_output, self._observe_container = self._layers.observe_output, self._layers.observe_container
        self._observe_target, self._observe_data = self._layers.observe_target, self._layers.observe_data
        self.losses_on = False  # install() to removal: `from torch.nn.functional import mse_loss` keeps our wrapper
        self._local = threading.local()
        self._holder: ForwardThread | None = None  # the first thread whose top-level call is under way

    def _thread(self) -> ForwardThread:
        """This thread's state (the hooks inline the lookup: they run at every module call)."""
        try:
            return self._local.state
        except AttributeError:
            st = self._local.state = ForwardThread()
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
            self._layers.made_step = self._steps.step
        elif isinstance(output, torch.Tensor) and output.dim() == 0 and output.requires_grad:
            if not isinstance(module, _Loss) and self._training():
                self._observe_target(loss_target(args, {}))

"""Torch side of neuraldbg: global hooks that observe every nn.Module, optimizer and backward pass.

Design (why it is cheap): every statistic is a 0-d tensor computed on the tensor's own device (see
tensorstats) and kept in a per-step buffer; the buffers go to the host in one `torch.stack(...).tolist()`
per sampled step (or every `every` steps), never one `.item()` per module. Unsampled steps keep a 0-d sum
per output where a NaN could be made (a NaN/Inf anywhere makes it non-finite, so a NaN is never missed) and
one fused gradient norm per parameter; sampled steps add activation, weight and data statistics. Forward
passes with gradients disabled (validation, inference) are not observed.

Its torch-side helpers: tensorstats (the statistics), roots (which model a module belongs to, and its
names), registry (the live models, held weakly), provenance (what is data, what is a target), records (step
buffers and their trip to the host); hookset undoes every hook. No other module imports torch."""
from __future__ import annotations

import itertools
import math
import os
import sys
import time
import weakref
from types import SimpleNamespace
from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F
from torch.nn.modules import module as _module
from torch.nn.modules.loss import _Loss
from torch.optim import optimizer as _optimizer

from neuraldbg_cli import tensorstats as ts
from neuraldbg_cli.errors import StopTraining
from neuraldbg_cli.events import ModelInfo, StepRecord
from neuraldbg_cli.hookset import HookSet
from neuraldbg_cli.provenance import (FLOAT_TARGET_LOSSES, Outputs, Sites, first_tensor, from_outside, loss_target,
                                      wrap_loss)
from neuraldbg_cli.records import StepBuffer, to_records, update_before, update_norms
from neuraldbg_cli.registry import Registry
from neuraldbg_cli.stepclock import CLOSE, READ, StepClock, series_name
from neuraldbg_cli.roots import OTHER, PARAMS, Root, find_owner, first_float
from neuraldbg_cli.tensorstats import CHEAP_ONLY, DEAD, EXACT, SAT

# True while torch.compile traces: the hooks then do nothing, so the compiled graph holds no neuraldbg code
_compiling: Callable[[], bool] = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)


SPARSE_GRADS = {"Embedding", "EmbeddingBag"}
# Between samples a dense gradient over this many elements is read through a 16K-element sample. A sample
# costs a few extra per-tensor ops outside the fused norm: below ~0.5 MB they cost more than the reading
# they save (measured: 2 * SAMPLE doubled the norm time of the transformer and the GPT; 8 * SAMPLE left it
# level there and cut the MLP's 4x)
SAMPLE_GRADS_OVER = 8 * ts.SAMPLE


def every_n(n: int, warmup: int = 10) -> Callable[[int], bool]:
    """Schedule: the first `warmup` steps (most failures start at initialisation), then every n-th."""
    return lambda step: step < warmup or step % n == 0


def _on_cpu(buf: StepBuffer) -> bool:
    """A step whose values are on the CPU is read at once: that needs no device synchronisation, and small
    tensors kept across steps would pin glibc's heap under the freed activations (measured: +25-60 MB RSS
    on the benchmark models when read every 10 steps)."""
    t = buf.checks[0] if buf.checks else buf.parts[0] if buf.parts else next(iter(buf.losses.values()), None)
    return t is None or t.device.type == "cpu"


def _has_grads(obj: Any) -> bool:
    """Whether a module's or optimizer's parameters hold any gradient (zero_grad would discard it)."""
    params = (obj.parameters() if isinstance(obj, torch.nn.Module)
              else (p for g in obj.param_groups for p in g["params"]))
    return any(p.grad is not None for p in params)


class Probe:
    """Installs the global hooks; turns what it sees into StepRecords handed to `on_steps` (in batches
    on a GPU, a step at a time on the CPU: see _on_cpu)."""

    def __init__(self, on_steps: Callable[[list[StepRecord]], None], on_models: Callable[[], None],
                 every: int = 10, warn: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> None:
        self.on_steps, self.on_models, self.warn = on_steps, on_models, warn
        self.every = every
        self.schedule = every_n(every)
        self.pid = os.getpid()
        self.reg = Registry(self._forget_params)  # the root models, held weakly (see registry); `roots`: live ones
        self._index = self.reg.index  # module -> (root, module name)
        self._pinfo = self.reg.pinfo  # id(param) -> (root name, module name), for live parameters only
        self._outputs = Outputs()  # storages of recent model outputs: never data (see provenance)
        self._sites = Sites()  # the call site that gives each data site its statistics (see provenance)
        self._losses_on = False  # torch.nn.functional losses observed (install() to removal)
        self.optimizers: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._opt_desc: dict[int, dict[str, Any]] = {}  # id(optimizer) -> description, kept after it is gone
        self.clock = StepClock()  # what a step is: see stepclock
        self._closure = False  # the optimizer step under way was given a closure: read gradients after it
        self._before: Optional[tuple] = None  # update_before() of the sampled optimizer step under way
        self._series_of: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()  # _loss_series
        self._series = ""  # loss series of the leading optimizer (see StepClock): losses no step took go there
        # per optimizer, dropped with it: (param ids, params, owners, id set, reg.gen)
        self._opt_cache: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()
        self._all: tuple[int, list, tuple, frozenset] = (-1, [], (), frozenset())  # every root's params
        self._views: tuple[list[int], list] = ([], [])  # _bit_views: data pointers, views
        self._sparse: tuple[int, frozenset] = (-1, frozenset())  # _sparse_ids: reg.gen, ids
        self.step = 0
        self._buf = StepBuffer(0, self.schedule(0))
        self._pending: list[StepBuffer] = []
        self._depth = 0
        self._cur: Optional[Root] = None
        self._prev: tuple[Optional[str], Optional[torch.Tensor]] = (None, None)
        self._in_backward = False
        self._scaled: set[int] = set()
        self._off: set[str] = set()
        self.faults: list[str] = []
        self.backward_calls = 0
        self._models_dirty = False
        self.stop_requested = False  # --stop-on: end the training when the next optimizer step is complete
        self.hooks = HookSet()

    # ---- install / uninstall ----

    def install(self) -> HookSet:
        h = self.hooks
        h.add(_module.register_module_forward_pre_hook(self._pre_forward))
        h.add(_module.register_module_forward_hook(self._post_forward, always_call=True))
        h.add(_optimizer.register_optimizer_step_pre_hook(self._pre_step))
        h.add(_optimizer.register_optimizer_step_post_hook(self._post_step))
        h.patch(torch.autograd, "backward", self._wrap_backward(torch.autograd.backward))
        h.patch(torch.optim.Optimizer, "__init__", self._wrap_opt_init(torch.optim.Optimizer.__init__))
        for owner in (torch.optim.Optimizer, torch.nn.Module):
            if "zero_grad" in owner.__dict__:
                h.patch(owner, "zero_grad", self._wrap_zero_grad(owner.__dict__["zero_grad"]))
        scaler = getattr(torch.amp, "GradScaler", None)
        if scaler is not None and "scale" in scaler.__dict__:
            h.patch(scaler, "scale", self._wrap_scale(scaler.scale))
        if "compile" in torch.nn.Module.__dict__:
            h.patch(torch.nn.Module, "compile", self._wrap_compile(torch.nn.Module.compile))
        if "_has_any_global_hook" in _module.__dict__:
            h.patch(_module, "_has_any_global_hook", self._foreign_global_hooks)
        self._losses_on = True  # off at removal: `from torch.nn.functional import mse_loss` kept our wrapper
        h.add(SimpleNamespace(remove=lambda: setattr(self, "_losses_on", False)))
        for name in FLOAT_TARGET_LOSSES:
            if name in F.__dict__:
                h.patch(F, name, wrap_loss(F.__dict__[name], self._loss_call))
        return h

    def close(self) -> None:
        """Finish the current step, hand over everything pending, remove all hooks."""
        try:
            buf = self._buf
            if (buf.parts or buf.checks or buf.losses or buf.pending is not None) and not self._idle_tail(buf):
                self._finalize()
            self.flush()
        finally:
            self.hooks.remove()

    def _idle_tail(self, buf: StepBuffer) -> bool:
        """After training, a last step that only saw forward passes (a final evaluation without no_grad) is
        no training step: dropped unless it made a NaN/Inf (read here, once, at the end of the run)."""
        if not self.step or self.clock.done or self.clock.backwards or buf.losses or buf.pending is not None:
            return False
        try:
            return math.isfinite(sum(ts.host_values(buf.parts + buf.checks)))
        except Exception:  # noqa: BLE001
            return False

    # ---- fault isolation: a bug here must never reach the user's script ----

    def _fault(self, part: str, err: BaseException) -> None:
        if part in self._off:
            return
        self._off.add(part)
        msg = f"neuraldbg: internal error in {part} ({type(err).__name__}: {err}); that observation is off, training continues"
        self.faults.append(msg)
        self.warn(msg)

    def _mine(self) -> bool:
        return os.getpid() == self.pid

    # ---- forward ----

    def _pre_forward(self, module: torch.nn.Module, args: tuple) -> None:
        if _compiling():  # traced by torch.compile: stay out of the graph (no recompiles, no graph breaks)
            return
        self._depth += 1
        if self._depth != 1 or "forward" in self._off:
            return
        try:
            self._enter_root(module, args)
        except Exception as e:  # noqa: BLE001
            self._fault("forward", e)

    def _training(self) -> bool:
        """Whether a forward now can be training: gradients on, in this process, and no torch.func
        transform under way (its tensors must not escape)."""
        return (torch.is_grad_enabled() and not torch.is_inference_mode_enabled() and self._mine()
                and not torch._C._are_functorch_transforms_active())

    def _enter_root(self, module: torch.nn.Module, args: tuple) -> None:
        self._cur = None
        if not self._training():
            return
        hit = self.reg.lookup(module)
        if hit is None:
            if isinstance(module, _Loss):
                self._observe_target(loss_target(args, {}))
                return
            if not any(p.requires_grad for p in module.parameters()):
                return  # a frozen model (a teacher) or a module without parameters: not trained, not a root
            owner = find_owner(module)
            known = self.reg.lookup(owner) if owner is not None else None
            if known is not None:  # a part added to a model seen before (a new head)
                root = known[0]
                self._rescan(root)
            else:
                root = self._register(owner or module)
            hit = self.reg.lookup(module) if owner is not None else None
        else:
            root = hit[0]
        self._close_backward_step()
        self._cur = root
        self._buf.active.add(root.name)
        self._prev = (None, None)
        if hit is None or hit[1] == "":  # the root model itself, not one of its parts called alone
            x = first_tensor(args)  # by position: `model(tokens, hidden)` has int64 data, and no float statistics
            if x is not None and x.is_floating_point() and x.numel() > 0 and from_outside(x, self._outputs):
                self._observe_data((root.name, "", "input"), x)

    def _observe_target(self, t: Optional[torch.Tensor]) -> None:
        """A loss's target, when it is data (a teacher's prediction or a mask is not)."""
        if t is not None and t.is_floating_point() and t.numel() > 0 and from_outside(t, self._outputs):
            self._observe_data(("", "", "target"), t)

    def _observe_data(self, key: tuple, x: torch.Tensor) -> None:
        if self._buf.sampled and self._sites.canonical(key, self.step):
            self._add_once(key, x, EXACT)
        else:
            self._buf.check(key, ts.cheap(x))

    def _loss_call(self, args: tuple, kwargs: dict) -> None:
        """A torch.nn.functional loss called by the script. Inside a module (a loss module's own forward,
        a model computing its loss) it is not: a loss module's target was observed at its call."""
        if _compiling() or self._depth or not self._losses_on or "forward" in self._off:
            return  # (torch.compile first: traced, it reads no attribute of ours, so it guards on none)
        try:
            if self._training():
                self._observe_target(loss_target(args, kwargs))
        except Exception as e:  # noqa: BLE001
            self._fault("forward", e)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if _compiling():
            return
        self._depth = max(0, self._depth - 1)
        root = self._cur
        if "forward" not in self._off:
            try:
                entry = root.observed.get(module) if root is not None else None
                if type(entry) is tuple:
                    self._observe_output(root, module, entry, args, output)
                elif entry is not None:
                    self._observe_container(root, entry, output)
                if self._depth == 0:
                    if root is not None:
                        self._outputs.add(output)  # a model's output is never data
                    else:
                        self._other_output(module, args, output)
            except Exception as e:  # noqa: BLE001
                self._fault("forward", e)
        if self._depth == 0:
            self._cur, self._prev = None, (None, None)

    def _other_output(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        """A top-level call that trains no root. A module with parameters is a model (a frozen teacher, a
        generator sampling under no_grad): its output is not data. One without parameters that returns a
        scalar needing a gradient is a loss (custom losses subclass nn.Module): its 2nd argument is a target."""
        if not self._mine() or torch._C._are_functorch_transforms_active():
            return
        if next(module.parameters(), None) is not None:
            self._outputs.add(output)
        elif (isinstance(output, torch.Tensor) and output.dim() == 0 and output.requires_grad
              and not isinstance(module, _Loss) and self._training()):
            self._observe_target(loss_target(args, {}))

    def _observe_output(self, root: Root, module: torch.nn.Module, entry: tuple, args: tuple, output: Any) -> None:
        """Activations are attributed to the layer they follow (the last module with parameters), so a
        shared `self.act` or a functional F.relu still points at the layer whose units are dead."""
        name, flags, kind, out_key = entry
        buf = self._buf
        layer, prev_out = self._prev
        if (kind == PARAMS and buf.sampled and layer is not None and not flags & CHEAP_ONLY
                and next(iter(module.children()), None) is None):
            x = first_float(args)  # the tensor entering this layer: a functional activation's output
            # (not for a normalisation layer: what enters it is the residual stream, not an activation; not for
            # a module with children, the root model included: its hook runs after them, on its own inputs)
            if x is not None and x is not prev_out and x.numel() > 0:  # its units: where this layer reads them
                axis = ts.unit_axis_flags(type(module).__name__)
                self._add_once((root.name, layer, "activation"), x, DEAD | SAT | axis)
        t = first_float(output)
        act = flags & (DEAD | SAT)  # an activation function
        if t is not None and t.numel() > 0 and (act or t is not prev_out):  # in-place activations: same tensor
            key = (root.name, layer, "activation") if act and layer is not None else out_key
            if (kind == PARAMS and not flags & CHEAP_ONLY) or (act and buf.sampled):
                # an activation's units lie where the layer it follows puts them
                axis = ts.unit_axis_flags(getattr(root.modules.get(layer), "type", None)) if act and layer else 0
                self._add_once(key, t, flags | axis)
            elif kind == OTHER or prev_out is None or first_float(args) is not prev_out:
                buf.check(key, ts.cheap(t))  # no statistics of its own, but a NaN made here is seen here
            # else: finite-preserving and fed the output just checked, so no NaN can start here. Also a
            # normalisation layer: its weights turn NaN through a gradient (checked every step) or a broken
            # optimizer update, which then shows at the next layer's check
        self._prev = (name if kind == PARAMS or not act else layer, t)  # activations keep the layer's name
        if name not in root._ordered:
            root._ordered.add(name)
            root.order.append(name)

    def _observe_container(self, root: Root, name: str, output: Any) -> None:
        t = first_float(output)
        if t is not None and t is not self._prev[1] and t.numel() > 0:  # a Sequential just passes its last output
            self._buf.check((root.name, name, "output"), ts.cheap(t))
        if name not in root._ordered:
            root._ordered.add(name)
            root.order.append(name)

    def _add_once(self, key: tuple, x: torch.Tensor, flags: int) -> None:
        """Full statistics for the first call of a site per sampled step; the cheap check otherwise."""
        buf = self._buf
        if buf.sampled and key not in buf.seen and not flags & CHEAP_ONLY:
            buf.seen.add(key)
            values, lay = ts.full(x, flags)
            buf.extend("full", key, values, lay)
        else:
            buf.check(key, ts.cheap(x))

    def _register(self, module: torch.nn.Module) -> Root:
        root = self.reg.register(module)
        self._models_dirty = True
        return root

    def _rescan(self, root: Root) -> None:
        if self.reg.rescan(root):
            self._models_dirty = True

    @property
    def roots(self) -> list[Root]:
        """The live root models; a model that is gone leaves (models() still describes it)."""
        self.reg.settle()
        return self.reg.live

    def _forget_params(self) -> None:
        """A root model died (called from a weakref callback, so plain assignments only): drop the caches
        that hold its parameters, so that nothing keeps their memory."""
        self._all = (-1, [], (), frozenset())
        self._views = ([], [])

    # ---- backward, loss, GradScaler ----

    def _wrap_backward(self, original: Callable) -> Callable:
        probe = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._in_backward or "backward" in probe._off or not probe._mine():
                return original(tensors, *args, **kwargs)
            probe._in_backward = True
            try:
                probe._close_backward_step()
                scaled = False
                try:
                    scaled = probe._record_loss(tensors)
                except Exception as e:  # noqa: BLE001
                    probe._fault("backward", e)
                result = original(tensors, *args, **kwargs)
                probe.backward_calls += 1
                probe._backward_end(scaled)
                return result
            finally:
                probe._in_backward = False

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        return backward

    def _backward_end(self, scaled: bool) -> None:
        """A backward pass ended: accumulate into the step (an optimizer exists), or read the gradients of a
        backward-counted step now (a zero_grad may follow), or close a step that hit the accumulation limit."""
        try:
            act = self.clock.backward_end(bool(self.optimizers))
        except Exception as e:  # noqa: BLE001
            self._fault("step", e)
            return
        if scaled and self.optimizers:
            # GradScaler: gradients are still scaled here (and inf on steps it will skip); they are read
            # unscaled at the optimizer's pre-step, and its step, not this backward, ends the step
            self._buf.scaled = True
        elif act == READ and "grads" not in self._off:
            try:
                self._grad_norms(self._buf, self._all_params()[0])
            except Exception as e:  # noqa: BLE001
                self._fault("grads", e)
        if act == CLOSE:
            try:
                self._advance()
            except Exception as e:  # noqa: BLE001
                self._fault("step", e)

    def _record_loss(self, tensors: Any) -> bool:
        """Keep the loss of this backward pass (summed into the step's, see StepClock.take_loss); True when it
        is a GradScaler-scaled loss, whose unscaled value scale() already kept."""
        t = tensors if isinstance(tensors, torch.Tensor) else None
        if t is None and isinstance(tensors, (tuple, list)) and len(tensors) == 1:
            t = tensors[0] if isinstance(tensors[0], torch.Tensor) else None
        if t is None or t.numel() != 1 or not t.is_floating_point():
            return False
        if id(t) in self._scaled:  # GradScaler already recorded the unscaled loss
            self._scaled.discard(id(t))
            return True
        if self.clock.take_loss():
            self._buf.add_loss(t.detach().float().reshape(()))
        return False

    def _wrap_scale(self, original: Callable) -> Callable:
        probe = self

        def scale(scaler: Any, outputs: Any) -> Any:
            result = original(scaler, outputs)
            try:
                if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and probe._mine():
                    if probe.clock.take_loss():
                        probe._buf.add_loss(outputs.detach().float().reshape(()))
                    probe._scaled.add(id(result))
            except Exception as e:  # noqa: BLE001
                probe._fault("loss", e)
            return result

        return scale

    def _wrap_opt_init(self, original: Callable) -> Callable:
        probe = self

        def __init__(opt: Any, *args: Any, **kwargs: Any) -> None:
            original(opt, *args, **kwargs)
            try:
                probe.optimizers.add(opt)
                probe._models_dirty = True
            except Exception as e:  # noqa: BLE001
                probe._fault("optimizer", e)

        return __init__

    def _wrap_zero_grad(self, original: Callable) -> Callable:
        """Optimizer.zero_grad / Module.zero_grad: discarding gradients no optimizer step used ends a step
        (see StepClock.zero_grad); it is closed first, while its gradients can still be read."""
        probe = self

        def zero_grad(obj: Any, *args: Any, **kwargs: Any) -> Any:
            if not _compiling() and "step" not in probe._off and probe._mine():
                try:
                    # a GradScaler's skipped step (scaled gradients, no optimizer step) is no forgotten step
                    if probe.clock.zero_grad(lambda: not probe._buf.scaled and _has_grads(obj)):
                        probe._advance()
                except Exception as e:  # noqa: BLE001
                    probe._fault("step", e)
            return original(obj, *args, **kwargs)

        zero_grad.__wrapped__ = original  # type: ignore[attr-defined]
        return zero_grad

    # ---- torch.compile ----

    def _wrap_compile(self, original: Callable) -> Callable:
        probe = self

        def compile(module: Any, *args: Any, **kwargs: Any) -> None:
            """model.compile() compiles the module's own call, hooks included, so its forward is never seen
            from outside: it becomes a root now (gradients, weights and loss are still observed)."""
            original(module, *args, **kwargs)
            try:
                trainable = any(p.requires_grad for p in module.parameters())
                if probe._mine() and probe.reg.lookup(module) is None and trainable:
                    probe._register(find_owner(module) or module)  # the whole model when a part is compiled
            except Exception as e:  # noqa: BLE001
                probe._fault("forward", e)

        return compile

    def _foreign_global_hooks(self) -> bool:
        """Stands in for torch's `_has_any_global_hook`, used (only) by torch.compile(model)'s warning that
        global hooks fire an extra time on its wrapper. Ours handle the wrapper, so only other hooks count."""
        hooks = [h for name in ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                                "_global_backward_hooks") for h in getattr(_module, name, {}).values()]
        return any(getattr(h, "__self__", None) is not self for h in hooks)

    # ---- optimizer steps ----

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        """Gradients are complete (and unscaled by a GradScaler) exactly here, for this optimizer's params;
        a closure step (LBFGS, Lightning) computes them inside step(): they are read after it. Only the
        outermost step counts (a wrapper optimizer stepping the one inside, a subclass's super().step())."""
        if not self._mine() or not self.clock.step_begin() or "grads" in self._off:
            return
        try:
            params, owners, ids = self._opt_params(opt)
            self._closure = bool(args and callable(args[0])) or callable(kwargs.get("closure"))
            if not self._closure:
                self._grad_norms(self._buf, params, owners, ids)
        except Exception as e:  # noqa: BLE001
            self._fault("grads", e)
            return
        if self._buf.sampled and "update" not in self._off:
            try:
                self._before = (self._buf, update_before(params, owners, self._sparse_ids()))
            except Exception as e:  # noqa: BLE001
                self._fault("update", e)

    def _opt_params(self, opt: Any) -> tuple[list, tuple, frozenset]:
        """This optimizer's observed parameters, their owners and ids; cached while its params are the same."""
        sig = tuple(map(id, itertools.chain.from_iterable(g["params"] for g in opt.param_groups)))
        reg = self.reg
        reg.settle()
        hit = self._opt_cache.get(opt)
        if hit is None or hit[0] != sig or hit[4] != reg.gen:
            params = [p for g in opt.param_groups for p in g["params"] if reg.claimed(p)]
            hit = (sig, params, tuple(self._pinfo[id(p)] for p in params), frozenset(map(id, params)), reg.gen)
            self._opt_cache[opt] = hit
        return hit[1], hit[2], hit[3]

    def _all_params(self) -> tuple[list, tuple, frozenset]:
        """Every live root's trainable parameters, their owners and ids."""
        reg = self.reg
        reg.settle()
        if self._all[0] != reg.gen:
            self._all = (-1, [], (), frozenset())  # let go first: a parameter only this cache held dies now
            reg.settle()
            params = [p for root in reg.live for _, p in root.params]
            self._all = (reg.gen, params, tuple(self._pinfo[id(p)] for p in params), frozenset(map(id, params)))
        return self._all[1], self._all[2], self._all[3]

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        """The outermost optimizer step ended: read what it left (a closure step's gradients, the update of a
        sampled step), give it the losses since the last step, and close the training step if it paces."""
        if not self._mine():
            return
        try:
            closes = self.clock.step_end(id(opt), self._optimizer_alive)
        except Exception as e:  # noqa: BLE001
            self._fault("step", e)
            return
        if closes is None:
            return
        closure, before, self._closure, self._before = self._closure, self._before, False, None
        buf = self._buf
        if closure and "grads" not in self._off:
            try:
                self._grad_norms(buf, *self._opt_params(opt))
            except Exception as e:  # noqa: BLE001
                self._fault("grads", e)
        if before is not None and before[0] is buf and "update" not in self._off:
            try:
                update_norms(buf, *before[1])
            except Exception as e:  # noqa: BLE001
                self._fault("update", e)
        try:
            if opt not in self.optimizers:
                self.optimizers.add(opt)
                self._models_dirty = True
            series = self._loss_series(opt)
            lead = id(opt) == self.clock.lead
            buf.assign_loss(series, main=lead)
            if lead:
                self._series = series
            if closes:
                self._advance()
        except Exception as e:  # noqa: BLE001
            self._fault("step", e)
        if closes and self.stop_requested:  # a step boundary: the weights are updated, no backward under way
            self.stop_requested = False
            raise StopTraining()

    def _loss_series(self, opt: Any) -> str:
        """stepclock.series_name of this optimizer, cached while its and all observed parameters are the same."""
        owners, every = self._opt_params(opt)[1], self._all_params()[1]
        hit = self._series_of.get(opt)
        if hit is None or hit[0] is not owners or hit[1] is not every:
            hit = self._series_of[opt] = (owners, every, series_name(owners, every))
        return hit[2]

    def _optimizer_alive(self, key: int) -> bool:
        """Whether the leading optimizer is still in play: it exists and, when this step's models are known,
        one of the models it trains ran in this step (a teacher trained first, then frozen and only used
        under no_grad, hands the lead to the student's optimizer at its first step)."""
        opt = next((o for o in list(self.optimizers) if id(o) == key), None)
        if opt is None:
            return False
        active = self._buf.active
        roots = {owner[0] for owner in self._opt_params(opt)[1]}
        return not active or not roots or not roots.isdisjoint(active)

    def _close_backward_step(self) -> None:
        """A backward-counted step (no optimizer: see StepClock) closes when the next forward or backward
        begins (so a manual update or an optimizer.step() right after it still belongs to it)."""
        if self.clock.due():
            try:
                self._advance()
            except Exception as e:  # noqa: BLE001
                self._fault("step", e)

    def _advance(self) -> None:
        self._finalize()
        self.step += 1
        self._buf = StepBuffer(self.step, self.schedule(self.step))

    def _finalize(self) -> None:
        """Close the current step: add gradient (and on sampled steps weight) statistics, queue it. Losses no
        optimizer step took (a backward-counted step) go to the last pacing optimizer's series."""
        buf = self._buf
        buf.time = time.perf_counter()
        buf.assign_loss(self._series)
        if buf.sampled and "rescan" not in self._off:
            try:
                for root in self.roots:
                    self._rescan(root)
            except Exception as e:  # noqa: BLE001
                self._fault("rescan", e)
        if "grads" not in self._off:
            try:
                self._grad_stats(buf)
            except Exception as e:  # noqa: BLE001
                self._fault("grads", e)
        self._pending.append(buf)
        if buf.sampled or len(self._pending) >= self.every or _on_cpu(buf):
            self.flush()

    def _grad_stats(self, buf: StepBuffer) -> None:
        params, owners, ids = self._all_params()
        if not buf.scaled and not ids <= buf.covered:  # outside an optimizer step, a GradScaler's gradients are still scaled
            self._grad_norms(buf, [p for p in params if id(p) not in buf.covered])
        if buf.sampled and params:  # weight norms, and checksums that tell whether any weight moved
            parts, shard_scale = ts.local_parts(params)
            with torch.no_grad():
                norms = torch._foreach_norm(parts)
                sums = ts.checksums(self._bit_views(params))
            buf.extend("weight", owners, list(norms), shard_scale)
            if isinstance(sums, torch.Tensor):
                buf.add("checksum", owners, sums)
            else:
                buf.extend("checksum", owners, sums)

    def _bit_views(self, params: list) -> list[Optional[torch.Tensor]]:
        """ts.bit_views() of every weight, kept while each weight keeps its storage (building them costs
        ops per parameter; `p.data = ...` gives a weight new storage, and new views)."""
        ptrs = [p.data_ptr() for p in params]
        if self._views[0] != ptrs:
            self._views = (ptrs, ts.bit_views(params))
        return self._views[1]

    def _grad_norms(self, buf: StepBuffer, params: list, owners: Optional[tuple] = None,
                    ids: Optional[frozenset] = None) -> None:
        """One fused norm over every gradient present; params without .grad are simply absent."""
        grads = [p.grad for p in params]
        if (owners is None or not buf.covered.isdisjoint(ids)  # type: ignore[arg-type]
                or any(g is None or g.layout != torch.strided for g in grads)):
            keep = [i for i, (p, g) in enumerate(zip(params, grads))
                    if g is not None and g.layout == torch.strided and id(p) not in buf.covered]
            grads = [grads[i] for i in keep]
            owners = tuple(self._pinfo[id(params[i])] for i in keep)
            buf.covered.update(ids if ids is not None else map(id, params))
            params = [params[i] for i in keep]
        else:
            buf.covered.update(ids if ids is not None else map(id, params))
        if not grads:
            return
        grads, scale = ts.local_parts(grads)
        if not buf.sampled:  # between samples a big dense gradient's RMS is read off an even sample of it
            sparse = self._sparse_ids()
            big = [i for i, (p, g) in enumerate(zip(params, grads))
                   if g.numel() > SAMPLE_GRADS_OVER and g.is_contiguous() and id(p) not in sparse]
            if big:
                grads, scale = list(grads), scale or [1.0] * len(grads)
                for i in big:
                    part = ts.sample(grads[i].view(-1))
                    scale[i] *= math.sqrt(grads[i].numel() / part.numel())
                    grads[i] = part
        with torch.no_grad():
            norms = torch._foreach_norm(grads)
        buf.extend("grad", owners, list(norms), scale)

    def _sparse_ids(self) -> frozenset:
        """Parameters whose gradient fills only a few rows (embeddings): always read whole, since a sample
        could miss every row in the batch and read as no gradient at all."""
        reg = self.reg
        reg.settle()
        if self._sparse[0] != reg.gen:
            self._sparse = (reg.gen, frozenset(id(p) for r in reg.live for name, p in r.params
                                               if name in r.modules and r.modules[name].type in SPARSE_GRADS))
        return self._sparse[1]

    # ---- host transfer ----

    def flush(self) -> None:
        """One device->host transfer for all pending steps; then hand the records over."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            records = to_records(pending, grads_observed="grads" not in self._off)
        except Exception as e:  # noqa: BLE001
            self._fault("transfer", e)
            return
        if self._models_dirty:
            self._models_dirty = False
            self.on_models()
        self.on_steps(records)

    # ---- description for the run directory ----

    def models(self) -> list[ModelInfo]:
        """Every root model seen, also those gone since (the trace names them)."""
        optimized = self._optimized_param_ids()
        return [root.info(optimized) for root in self.reg.roots]

    def optimizer_info(self) -> list[dict[str, Any]]:
        """Every optimizer the run used, also those already garbage-collected (a pre-training phase's)."""
        for opt in list(self.optimizers):
            groups = [{k: v for k, v in g.items() if k != "params" and isinstance(v, (int, float, bool, str))}
                      for g in opt.param_groups]
            self._opt_desc[id(opt)] = {"type": type(opt).__name__, "groups": groups,
                                       "params": sum(p.numel() for g in opt.param_groups for p in g["params"])}
        return list(self._opt_desc.values())

    def _optimized_param_ids(self) -> set[int]:
        return {id(p) for opt in list(self.optimizers) for g in opt.param_groups for p in g["params"]}


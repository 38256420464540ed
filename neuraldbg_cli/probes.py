"""Torch side of neuraldbg: global hooks that observe every nn.Module, optimizer and backward pass.

Design (why it is cheap): every statistic is a 0-d tensor computed on the tensor's own device (see
tensorstats) and kept in a per-step buffer; the buffers go to the host in one `torch.stack(...).tolist()`
per sampled step (or every `every` steps), never one `.item()` per module. Unsampled steps keep a 0-d sum
per output where a NaN could be made (a NaN/Inf anywhere makes it non-finite, so a NaN is never missed) and
one fused gradient norm per parameter; sampled steps add activation, weight and data statistics. Forward
passes with gradients disabled (validation, inference) are not observed.

Its torch-side helpers: tensorstats (the statistics), roots (which model a module belongs to, and its
names), records (step buffers and their trip to the host); hookset undoes every hook. No other module
imports torch."""
from __future__ import annotations

import itertools
import math
import os
import sys
import weakref
from collections import defaultdict
from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer

from neuraldbg_cli import tensorstats as ts
from neuraldbg_cli.events import ModelInfo, StepRecord
from neuraldbg_cli.hookset import HookSet
from neuraldbg_cli.records import StepBuffer, to_records
from neuraldbg_cli.roots import OTHER, PARAMS, Root, find_owner, first_float, register_root, rescan_root
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
    t = buf.checks[0] if buf.checks else buf.parts[0] if buf.parts else buf.losses[0] if buf.losses else None
    return t is None or t.device.type == "cpu"


class Probe:
    """Installs the global hooks; turns what it sees into StepRecords handed to `on_steps` (in batches
    on a GPU, a step at a time on the CPU: see _on_cpu)."""

    def __init__(self, on_steps: Callable[[list[StepRecord]], None], on_models: Callable[[], None],
                 every: int = 10, warn: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> None:
        self.on_steps, self.on_models, self.warn = on_steps, on_models, warn
        self.every = every
        self.schedule = every_n(every)
        self.pid = os.getpid()
        self.roots: list[Root] = []
        self._index: dict[int, tuple[Root, str]] = {}  # id(module) of every module of a root
        self._class_count: dict[str, int] = defaultdict(int)
        self._pinfo: dict[int, tuple[str, str]] = {}  # id(param) -> (root name, module name)
        self.optimizers: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._opt_desc: dict[int, dict[str, Any]] = {}  # id(optimizer) -> description, kept after it is gone
        self._pacer: Optional[int] = None  # id of the optimizer whose step ends a training step
        self._waiting: dict[int, int] = defaultdict(int)  # steps of other optimizers since the pacer's last
        self._opt_depth: dict[int, int] = defaultdict(int)
        self._opt_stepped = False
        self._backward_done = False
        # per optimizer, dropped with it: (param ids, params, owners, id set, len(_pinfo))
        self._opt_cache: "weakref.WeakKeyDictionary[Any, tuple]" = weakref.WeakKeyDictionary()
        self._all: tuple[int, list, tuple, frozenset] = (-1, [], (), frozenset())  # every root's params
        self._views: tuple[list[int], list] = ([], [])  # _bit_views: data pointers, views
        self._sparse: tuple[int, frozenset] = (-1, frozenset())  # _sparse_ids: len(_pinfo), ids
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
        scaler = getattr(torch.amp, "GradScaler", None)
        if scaler is not None and "scale" in scaler.__dict__:
            h.patch(scaler, "scale", self._wrap_scale(scaler.scale))
        if "compile" in torch.nn.Module.__dict__:
            h.patch(torch.nn.Module, "compile", self._wrap_compile(torch.nn.Module.compile))
        if "_has_any_global_hook" in _module.__dict__:
            h.patch(_module, "_has_any_global_hook", self._foreign_global_hooks)
        return h

    def close(self) -> None:
        """Finish the current step, hand over everything pending, remove all hooks."""
        try:
            if self._buf.parts or self._buf.checks or self._buf.losses:
                self._finalize()
            self.flush()
        finally:
            self.hooks.remove()

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

    def _enter_root(self, module: torch.nn.Module, args: tuple) -> None:
        self._cur = None
        if (not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not self._mine()
                or torch._C._are_functorch_transforms_active()):  # torch.func/vmap tensors must not escape
            return
        hit = self._index.get(id(module))
        if hit is None:
            if not any(p.requires_grad for p in module.parameters()):
                self._observe_target(args)  # a loss module: its second argument is the target
                return
            owner = find_owner(module)
            root = self._register(owner or module)
            hit = self._index.get(id(module)) if owner is not None else None
        else:
            root = hit[0]
        self._close_backward_step()
        self._cur = root
        self._buf.active.add(root.name)
        self._prev = (None, None)
        if hit is None or hit[1] == "":  # the root model itself, not one of its parts called alone
            x = first_float(args)
            if x is not None and x.numel() > 0:
                self._add_once((root.name, "", "input"), x, EXACT)

    def _observe_target(self, args: tuple) -> None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) >= 2 and tensors[1].is_floating_point() and tensors[1].numel() > 0:
            self._add_once(("", "", "target"), tensors[1], EXACT)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        if _compiling():
            return
        self._depth = max(0, self._depth - 1)
        root = self._cur
        if root is None or "forward" in self._off:
            return
        try:
            entry = root.observed.get(id(module))
            if entry is not None:
                self._observe_output(root, module, entry, args, output)
            elif id(module) in root.containers:
                self._observe_container(root, root.containers[id(module)], output)
        except Exception as e:  # noqa: BLE001
            self._fault("forward", e)
        if self._depth == 0:
            self._cur, self._prev = None, (None, None)

    def _observe_output(self, root: Root, module: torch.nn.Module, entry: tuple, args: tuple, output: Any) -> None:
        """Activations are attributed to the layer they follow (the last module with parameters), so a
        shared `self.act` or a functional F.relu still points at the layer whose units are dead."""
        name, flags, kind, out_key = entry
        buf = self._buf
        layer, prev_out = self._prev
        if kind == PARAMS and buf.sampled and layer is not None and not flags & CHEAP_ONLY:
            x = first_float(args)  # the tensor entering this layer: a functional activation's output
            # (not for a normalisation layer: what enters it is the residual stream, not an activation)
            if x is not None and x is not prev_out and x.numel() > 0:
                self._add_once((root.name, layer, "activation"), x, DEAD | SAT)
        t = first_float(output)
        act = flags & (DEAD | SAT)  # an activation function
        if t is not None and t.numel() > 0 and (act or t is not prev_out):  # in-place activations: same tensor
            key = (root.name, layer, "activation") if act and layer is not None else out_key
            if (kind == PARAMS and not flags & CHEAP_ONLY) or (act and buf.sampled):
                self._add_once(key, t, flags)
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
        root = register_root(module, self._class_count, self._index, self._pinfo)
        self.roots.append(root)
        self._models_dirty = True
        return root

    def _rescan(self, root: Root) -> None:
        if rescan_root(root, self._pinfo):
            self._models_dirty = True

    # ---- backward, loss, GradScaler ----

    def _wrap_backward(self, original: Callable) -> Callable:
        probe = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._in_backward or "backward" in probe._off or not probe._mine():
                return original(tensors, *args, **kwargs)
            probe._in_backward = True
            try:
                scaled = False
                try:
                    scaled = probe._record_loss(tensors)
                except Exception as e:  # noqa: BLE001
                    probe._fault("backward", e)
                probe._close_backward_step()
                result = original(tensors, *args, **kwargs)
                probe.backward_calls += 1
                if scaled and probe.optimizers:
                    # GradScaler: gradients are still scaled here (and inf on steps it will skip); they are read
                    # unscaled at the optimizer's pre-step, and its step, not this backward, ends the step
                    probe._buf.scaled = True
                    return result
                probe._backward_done = True
                if not probe._opt_stepped:  # no optimizer (yet): read gradients now, zero_grad may follow
                    try:
                        probe._grad_norms(probe._buf, [p for r in probe.roots for _, p in r.params])
                    except Exception as e:  # noqa: BLE001
                        probe._fault("grads", e)
                return result
            finally:
                probe._in_backward = False

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        return backward

    def _record_loss(self, tensors: Any) -> bool:
        """Keep the loss of this backward pass; True when it is a GradScaler-scaled loss."""
        t = tensors if isinstance(tensors, torch.Tensor) else None
        if t is None and isinstance(tensors, (tuple, list)) and len(tensors) == 1:
            t = tensors[0] if isinstance(tensors[0], torch.Tensor) else None
        if t is None or t.numel() != 1 or not t.is_floating_point():
            return False
        if id(t) in self._scaled:  # GradScaler already recorded the unscaled loss
            self._scaled.discard(id(t))
            return True
        self._buf.losses.append(t.detach().float().reshape(1))
        return False

    def _wrap_scale(self, original: Callable) -> Callable:
        probe = self

        def scale(scaler: Any, outputs: Any) -> Any:
            result = original(scaler, outputs)
            try:
                if isinstance(outputs, torch.Tensor) and outputs.numel() == 1 and probe._mine():
                    probe._buf.losses.append(outputs.detach().float().reshape(1))
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

    # ---- torch.compile ----

    def _wrap_compile(self, original: Callable) -> Callable:
        probe = self

        def compile(module: Any, *args: Any, **kwargs: Any) -> None:
            """model.compile() compiles the module's own call, hooks included, so its forward is never seen
            from outside: it becomes a root now (gradients, weights and loss are still observed)."""
            original(module, *args, **kwargs)
            try:
                trainable = any(p.requires_grad for p in module.parameters())
                if probe._mine() and id(module) not in probe._index and trainable:
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
        """Gradients are complete (and unscaled by a GradScaler) exactly here, for this optimizer's params."""
        self._opt_depth[id(opt)] += 1
        if self._opt_depth[id(opt)] != 1 or "grads" in self._off or not self._mine():
            return
        try:
            params, owners, ids = self._opt_params(opt)
            self._grad_norms(self._buf, params, owners, ids)
        except Exception as e:  # noqa: BLE001
            self._fault("grads", e)

    def _opt_params(self, opt: Any) -> tuple[list, tuple, frozenset]:
        """This optimizer's observed parameters, their owners and ids; cached while its params are the same."""
        sig = tuple(map(id, itertools.chain.from_iterable(g["params"] for g in opt.param_groups)))
        hit = self._opt_cache.get(opt)
        if hit is None or hit[0] != sig or hit[4] != len(self._pinfo):
            params = [p for g in opt.param_groups for p in g["params"] if id(p) in self._pinfo]
            hit = (sig, params, tuple(self._pinfo[id(p)] for p in params), frozenset(map(id, params)),
                   len(self._pinfo))
            self._opt_cache[opt] = hit
        return hit[1], hit[2], hit[3]

    def _all_params(self) -> tuple[list, tuple, frozenset]:
        """Every root's trainable parameters, their owners and ids (roots only ever grow)."""
        if self._all[0] != len(self._pinfo):
            params = [p for root in self.roots for _, p in root.params]
            self._all = (len(self._pinfo), params, tuple(self._pinfo[id(p)] for p in params),
                         frozenset(map(id, params)))
        return self._all[1], self._all[2], self._all[3]

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_depth[id(opt)] -= 1
        if self._opt_depth[id(opt)] > 0 or not self._mine():  # subclass calling super().step()
            return
        try:
            if opt not in self.optimizers:
                self.optimizers.add(opt)
                self._models_dirty = True
            if self._paces(id(opt)):
                self._opt_stepped = True
                self._backward_done = False
                self._advance()
        except Exception as e:  # noqa: BLE001
            self._fault("step", e)

    def _paces(self, key: int) -> bool:
        """Whether this optimizer's step ends the training step. The first optimizer to step paces; another
        one (a GAN's second optimizer) steps within the same training step, unless it steps twice while the
        pacer does not: then it takes over (a new phase of the script with a new optimizer)."""
        if key != self._pacer:
            self._waiting[key] += 1
            if self._pacer is not None and self._waiting[key] < 2:
                return False
            self._pacer = key
        self._waiting.clear()
        return True

    def _close_backward_step(self) -> None:
        """Until some optimizer.step() happens, each backward pass is a step; it closes when the next
        forward or backward begins (so an optimizer.step() right after it still belongs to it)."""
        if self._backward_done and not self._opt_stepped:
            self._backward_done = False
            try:
                self._advance()
            except Exception as e:  # noqa: BLE001
                self._fault("step", e)

    def _advance(self) -> None:
        self._finalize()
        self.step += 1
        self._buf = StepBuffer(self.step, self.schedule(self.step))

    def _finalize(self) -> None:
        """Close the current step: add gradient (and on sampled steps weight) statistics, queue it."""
        buf = self._buf
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
            with torch.no_grad():
                norms = torch._foreach_norm(params)
                sums = ts.checksums(self._bit_views(params))
            buf.extend("weight", owners, list(norms))
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
        scale = None
        if not buf.sampled:  # between samples a big dense gradient's RMS is read off an even sample of it
            sparse = self._sparse_ids()
            big = [i for i, (p, g) in enumerate(zip(params, grads))
                   if g.numel() > SAMPLE_GRADS_OVER and g.is_contiguous() and id(p) not in sparse]
            if big:
                grads, scale = list(grads), [1.0] * len(grads)
                for i in big:
                    part = ts.sample(grads[i].view(-1))
                    scale[i] = math.sqrt(grads[i].numel() / part.numel())
                    grads[i] = part
        with torch.no_grad():
            norms = torch._foreach_norm(grads)
        buf.extend("grad", owners, list(norms), scale)

    def _sparse_ids(self) -> frozenset:
        """Parameters whose gradient fills only a few rows (embeddings): always read whole, since a sample
        could miss every row in the batch and read as no gradient at all."""
        if self._sparse[0] != len(self._pinfo):
            types = {(r.name, n): info.type for r in self.roots for n, info in r.modules.items()}
            self._sparse = (len(self._pinfo), frozenset(
                pid for pid, owner in self._pinfo.items() if types.get(owner) in SPARSE_GRADS))
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
        optimized = self._optimized_param_ids()
        return [root.info(optimized) for root in self.roots]

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


"""Torch side of neuraldbg: global hooks that observe every nn.Module, optimizer and backward pass.

Design (why it is cheap): every statistic is a small tensor computed on the tensor's own device and kept
in a per-step buffer; the buffers go to the host in one `torch.cat(...).tolist()` per sampled step (or
every `every` steps), never one `.item()` per module. Unsampled steps only keep a 0-d sum per output
(a NaN/Inf anywhere makes it non-finite, so a NaN is never missed); sampled steps keep full statistics.
Forward passes with gradients disabled (validation, inference) are not observed.

This is the only module that imports torch."""
from __future__ import annotations

import os
import sys
import weakref
from collections import defaultdict
from typing import Any, Callable, Optional

import torch
from torch.nn.modules import module as _module
from torch.optim import optimizer as _optimizer

from neuraldbg_cli.events import ActStats, GradStats, ModelInfo, ModuleInfo, StepRecord

RELU_LIKE = {"ReLU", "ReLU6", "Threshold", "RReLU"}
SATURATING = {"Sigmoid", "Tanh", "Hardtanh", "Softsign", "Hardsigmoid", "LogSigmoid", "Tanhshrink"}
NO_RANGE_CHECK = {"Softmax", "Softmax2d", "LogSoftmax", "Softmin", "Dropout", "Dropout1d", "Dropout2d",
                  "Identity", "Embedding", "EmbeddingBag"}

DEAD, SAT = 1, 2  # which expensive statistics a site needs


def every_n(n: int, warmup: int = 10) -> Callable[[int], bool]:
    """Schedule: the first `warmup` steps (most failures start at initialisation), then every n-th."""
    return lambda step: step < warmup or step % n == 0


class HookSet:
    """Owns every handle and monkeypatch; `remove()` undoes all of them, idempotently, even on error."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def add(self, handle: Any) -> None:
        self._undo.append(handle.remove)

    def patch(self, owner: Any, name: str, replacement: Any) -> None:
        original = owner.__dict__[name]
        setattr(owner, name, replacement)
        self._undo.append(lambda: setattr(owner, name, original))

    def remove(self) -> None:
        while self._undo:
            undo = self._undo.pop()
            try:
                undo()
            except Exception:  # noqa: BLE001 - keep undoing the rest
                pass

    def __enter__(self) -> "HookSet":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def _first_float(obj: Any, depth: int = 0) -> Optional[torch.Tensor]:
    """The primary floating tensor of a module output (tensor, tuple, list, dict, dataclass-ish)."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_floating_point() and obj.layout == torch.strided else None
    if depth > 2:
        return None
    if isinstance(obj, (tuple, list)):
        items = obj
    elif isinstance(obj, dict):
        items = obj.values()
    elif hasattr(obj, "__dataclass_fields__"):
        items = [getattr(obj, f, None) for f in obj.__dataclass_fields__]
    else:
        return None
    for item in items:
        t = _first_float(item, depth + 1)
        if t is not None:
            return t
    return None


def _cheap(x: torch.Tensor) -> torch.Tensor:
    """One reduction: non-finite iff some element is NaN/Inf (fp32 accumulation, no overflow in practice)."""
    return x.detach().sum(dtype=torch.float32).reshape(1)


def _full(x: torch.Tensor, flags: int) -> torch.Tensor:
    """mean, std, min, max, zero_frac, dead_frac, sat01, sat11, nonfinite (9 values, on device)."""
    x = x.detach()
    if x.dtype != torch.float32:
        x = x.float()
    n = x.numel()
    std, mean = torch.std_mean(x, correction=0)
    mn, mx = torch.aminmax(x.reshape(-1))
    nonfinite = (n - torch.isfinite(x).sum()).float()
    zero = (x == 0).sum().float() / n
    zeros = torch.zeros((), device=x.device)
    if flags & DEAD and x.dim() >= 2:
        unit = 1 if x.dim() in (4, 5) else x.dim() - 1
        dims = tuple(d for d in range(x.dim()) if d != unit)
        dead = (x.amax(dim=dims) <= 0).float().mean()
    else:
        dead = zeros
    if flags & SAT:
        sat01 = ((x - 0.5).abs() > 0.48).float().mean()
        sat11 = (x.abs() > 0.96).float().mean()
    else:
        sat01 = sat11 = zeros
    return torch.stack([mean, std, mn, mx, zero, dead, sat01, sat11, nonfinite])


class _Root:
    """A root model: the outermost module called with gradients on. Names come from its named_modules()."""

    def __init__(self, name: str, module: torch.nn.Module) -> None:
        self.name = name
        self.ref = weakref.ref(module)
        self.cls = type(module).__name__
        self.observed: dict[int, tuple[str, int, bool]] = {}  # id(module) -> (name, flags, has_params)
        self.modules: dict[str, ModuleInfo] = {}
        self.params: list[tuple[str, torch.nn.Parameter]] = []  # trainable, deduplicated
        self.order: list[str] = []
        self._ordered: set[str] = set()
        self.n_modules = 0
        self.n_params = 0


class _Buffer:
    """Device tensors of one step plus the host-side layout that tells what each value is."""

    __slots__ = ("step", "sampled", "parts", "layout", "losses", "seen", "covered", "scale")

    def __init__(self, step: int, sampled: bool) -> None:
        self.step, self.sampled = step, sampled
        self.parts: list[torch.Tensor] = []
        self.layout: list[tuple[str, tuple, int]] = []  # (what, key, length)
        self.losses: list[torch.Tensor] = []
        self.seen: set[tuple] = set()
        self.covered: set[int] = set()  # params whose gradient was read at an optimizer's pre-step
        self.scale: Optional[float] = None

    def add(self, what: str, key: tuple, t: torch.Tensor) -> None:
        self.parts.append(t)
        self.layout.append((what, key, t.numel()))


class Probe:
    """Installs the global hooks; turns what it sees into StepRecords handed to `on_steps` in batches."""

    def __init__(self, on_steps: Callable[[list[StepRecord]], None], on_models: Callable[[], None],
                 every: int = 10, warn: Callable[[str], None] = lambda m: print(m, file=sys.stderr)) -> None:
        self.on_steps, self.on_models, self.warn = on_steps, on_models, warn
        self.every = every
        self.schedule = every_n(every)
        self.pid = os.getpid()
        self.roots: list[_Root] = []
        self._index: dict[int, tuple[_Root, str]] = {}  # id(module) of every module of a root
        self._class_count: dict[str, int] = defaultdict(int)
        self._pinfo: dict[int, tuple[str, str]] = {}  # id(param) -> (root name, module name)
        self.optimizers: "weakref.WeakSet[torch.optim.Optimizer]" = weakref.WeakSet()
        self._opt_counts: dict[int, int] = defaultdict(int)
        self._opt_depth: dict[int, int] = defaultdict(int)
        self._opt_stepped = False
        self._backward_done = False
        self._before: dict[int, tuple[list, list]] = {}
        self.step = 0
        self._buf = _Buffer(0, self.schedule(0))
        self._pending: list[_Buffer] = []
        self._depth = 0
        self._cur: Optional[_Root] = None
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
        return h

    def close(self) -> None:
        """Finish the current step, hand over everything pending, remove all hooks."""
        try:
            if self._buf.parts or self._buf.losses:
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
        self._depth += 1
        if self._depth != 1 or "forward" in self._off:
            return
        try:
            self._enter_root(module, args)
        except Exception as e:  # noqa: BLE001
            self._fault("forward", e)

    def _enter_root(self, module: torch.nn.Module, args: tuple) -> None:
        self._cur = None
        if not torch.is_grad_enabled() or torch.is_inference_mode_enabled() or not self._mine():
            return
        hit = self._index.get(id(module))
        if hit is None:
            if not any(p.requires_grad for p in module.parameters()):
                self._observe_target(args)  # a loss module: its second argument is the target
                return
            root = self._register(module)
        else:
            root = hit[0]
        self._close_backward_step()
        self._cur = root
        self._prev = (None, None)
        if hit is None or hit[1] == "":  # the root model itself, not one of its parts called alone
            x = _first_float(args)
            if x is not None and x.numel() > 0:
                self._add_once((root.name, "", "input"), x, 0)

    def _observe_target(self, args: tuple) -> None:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if len(tensors) >= 2 and tensors[1].is_floating_point() and tensors[1].numel() > 0:
            self._add_once(("", "", "target"), tensors[1], 0)

    def _post_forward(self, module: torch.nn.Module, args: tuple, output: Any) -> None:
        self._depth = max(0, self._depth - 1)
        root = self._cur
        if root is None or "forward" in self._off:
            return
        try:
            entry = root.observed.get(id(module))
            if entry is not None:
                self._observe_output(root, module, entry, args, output)
        except Exception as e:  # noqa: BLE001
            self._fault("forward", e)
        if self._depth == 0:
            self._cur, self._prev = None, (None, None)

    def _observe_output(self, root: _Root, module: torch.nn.Module, entry: tuple, args: tuple, output: Any) -> None:
        """Activations are attributed to the layer they follow (the last module with parameters), so a
        shared `self.act` or a functional F.relu still points at the layer whose units are dead."""
        name, flags, has_params = entry
        buf = self._buf
        layer, prev_out = self._prev
        if buf.sampled and has_params and layer is not None:
            x = _first_float(args)  # the tensor entering this layer: a functional activation's output
            if x is not None and x is not prev_out and x.numel() > 0:
                self._add_once((root.name, layer, "activation"), x, DEAD | SAT)
        t = _first_float(output)
        if t is not None and t.numel() > 0:
            if flags and not has_params and layer is not None:
                self._add_once((root.name, layer, "activation"), t, flags)
            else:
                self._add_once((root.name, name, "output"), t, flags)
        self._prev = (name if has_params else layer, t)
        if name not in root._ordered:
            root._ordered.add(name)
            root.order.append(name)

    def _add_once(self, key: tuple, x: torch.Tensor, flags: int) -> None:
        """Full statistics for the first call of a site per sampled step; the cheap check otherwise."""
        buf = self._buf
        if buf.sampled and key not in buf.seen:
            buf.seen.add(key)
            buf.add("full", key, _full(x, flags))
        else:
            buf.add("cheap", key, _cheap(x))

    def _register(self, module: torch.nn.Module) -> _Root:
        cls = type(module).__name__
        k = self._class_count[cls]
        self._class_count[cls] += 1
        root = _Root(cls if k == 0 else f"{cls}#{k}", module)
        for name, m in module.named_modules():
            root.n_modules += 1
            self._index.setdefault(id(m), (root, name))
            own = [p for p in m.parameters(recurse=False) if p.requires_grad]
            leaf = next(iter(m.children()), None) is None
            if not own and not leaf:
                continue
            tname = type(m).__name__
            flags = (DEAD if tname in RELU_LIKE else 0) | (SAT if tname in SATURATING else 0)
            root.observed[id(m)] = (name, flags, bool(own))
            fresh = [p for p in own if id(p) not in self._pinfo]
            for p in fresh:
                self._pinfo[id(p)] = (root.name, name)
                root.params.append((name, p))
            numel = sum(p.numel() for p in fresh)
            root.n_params += numel
            is_matrix = any(p.dim() >= 2 for p in fresh) and tname not in ("Embedding", "EmbeddingBag")
            root.modules[name] = ModuleInfo(name=name, type=tname, params=numel, weight_ndim2=is_matrix)
        self.roots.append(root)
        self._models_dirty = True
        return root

    # ---- backward, loss, GradScaler ----

    def _wrap_backward(self, original: Callable) -> Callable:
        probe = self

        def backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
            if probe._in_backward or "backward" in probe._off or not probe._mine():
                return original(tensors, *args, **kwargs)
            probe._in_backward = True
            try:
                try:
                    probe._record_loss(tensors)
                except Exception as e:  # noqa: BLE001
                    probe._fault("backward", e)
                probe._close_backward_step()
                result = original(tensors, *args, **kwargs)
                probe.backward_calls += 1
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

    def _record_loss(self, tensors: Any) -> None:
        t = tensors if isinstance(tensors, torch.Tensor) else None
        if t is None and isinstance(tensors, (tuple, list)) and len(tensors) == 1:
            t = tensors[0] if isinstance(tensors[0], torch.Tensor) else None
        if t is None or t.numel() != 1 or not t.is_floating_point():
            return
        if id(t) in self._scaled:  # GradScaler already recorded the unscaled loss
            self._scaled.discard(id(t))
            return
        self._buf.losses.append(t.detach().float().reshape(1))

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

    # ---- optimizer steps ----

    def _pre_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        """Gradients are complete (and unscaled by a GradScaler) exactly here, for this optimizer's params."""
        self._opt_depth[id(opt)] += 1
        if self._opt_depth[id(opt)] != 1 or "grads" in self._off or not self._mine():
            return
        try:
            params = [p for g in opt.param_groups for p in g["params"] if id(p) in self._pinfo]
            self._grad_norms(self._buf, params)
            if self._buf.sampled and params:  # exact update size: weights before vs after this step
                self._before[id(opt)] = (params, [p.detach().clone() for p in params])
        except Exception as e:  # noqa: BLE001
            self._fault("grads", e)

    def _post_step(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_depth[id(opt)] -= 1
        if self._opt_depth[id(opt)] > 0 or not self._mine():  # subclass calling super().step()
            return
        before = self._before.pop(id(opt), None)
        try:
            if before is not None:
                params, old = before
                deltas = torch._foreach_norm(torch._foreach_sub([p.detach() for p in params], old))
                self._buf.add("update", tuple(self._pinfo[id(p)] for p in params),
                              torch.stack([x.float() for x in deltas]))
            if opt not in self.optimizers:
                self.optimizers.add(opt)
                self._models_dirty = True
            lead = max(self._opt_counts.values(), default=0)
            self._opt_counts[id(opt)] += 1
            if self._opt_counts[id(opt)] > lead:
                self._opt_stepped = True
                self._backward_done = False
                self._advance()
        except Exception as e:  # noqa: BLE001
            self._fault("step", e)

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
        self._buf = _Buffer(self.step, self.schedule(self.step))

    def _finalize(self) -> None:
        """Close the current step: add gradient (and on sampled steps weight) statistics, queue it."""
        buf = self._buf
        if "grads" not in self._off:
            try:
                self._grad_stats(buf)
            except Exception as e:  # noqa: BLE001
                self._fault("grads", e)
        self._pending.append(buf)
        if buf.sampled or len(self._pending) >= self.every:
            self.flush()

    def _grad_stats(self, buf: _Buffer) -> None:
        rest = [p for root in self.roots for _, p in root.params if id(p) not in buf.covered]
        self._grad_norms(buf, rest)
        if buf.sampled:
            params = [p for root in self.roots for _, p in root.params]
            if params:
                norms = torch._foreach_norm([p.detach() for p in params])
                buf.add("weight", tuple(self._pinfo[id(p)] for p in params), torch.stack([x.float() for x in norms]))

    def _grad_norms(self, buf: _Buffer, params: list) -> None:
        """One fused norm over every gradient present; params without .grad are simply absent."""
        with_grad = [p for p in params if p.grad is not None and p.grad.layout == torch.strided
                     and id(p) not in buf.covered]
        buf.covered.update(id(p) for p in params)
        if with_grad:
            norms = torch._foreach_norm([p.grad for p in with_grad])
            buf.add("grad", tuple(self._pinfo[id(p)] for p in with_grad), torch.stack([x.float() for x in norms]))

    # ---- host transfer ----

    def flush(self) -> None:
        """One device->host transfer for all pending steps; then hand the records over."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        try:
            records = self._to_host(pending)
        except Exception as e:  # noqa: BLE001
            self._fault("transfer", e)
            return
        if self._models_dirty:
            self._models_dirty = False
            self.on_models()
        self.on_steps(records)

    def _to_host(self, pending: list[_Buffer]) -> list[StepRecord]:
        tensors: list[torch.Tensor] = []
        for buf in pending:
            if buf.losses:
                buf.add("loss", ("", "", "loss"), torch.cat(buf.losses).mean().reshape(1))
            tensors.extend(t.reshape(-1).float() for t in buf.parts)
        values = _host_values(tensors)
        records, i = [], 0
        for buf in pending:
            rec = StepRecord(step=buf.step, sampled=buf.sampled)
            for what, key, length in buf.layout:
                chunk = values[i:i + length]
                i += length
                _place(rec, what, key, chunk)
            records.append(rec)
        return records

    # ---- description for the run directory ----

    def models(self) -> list[ModelInfo]:
        in_opt = self._optimized_param_ids()
        out = []
        for root in self.roots:
            for name, p in root.params:
                if id(p) in in_opt:
                    root.modules[name].in_optimizer = True
            out.append(ModelInfo(name=root.name, cls=root.cls, modules=root.modules, n_modules=root.n_modules,
                                 n_params=root.n_params, order=list(root.order)))
        return out

    def optimizer_info(self) -> list[dict[str, Any]]:
        out = []
        for opt in list(self.optimizers):
            groups = [{k: v for k, v in g.items() if k != "params" and isinstance(v, (int, float, bool, str))}
                      for g in opt.param_groups]
            out.append({"type": type(opt).__name__, "groups": groups,
                        "params": sum(p.numel() for g in opt.param_groups for p in g["params"])})
        return out

    def _optimized_param_ids(self) -> set[int]:
        return {id(p) for opt in list(self.optimizers) for g in opt.param_groups for p in g["params"]}


def _host_values(tensors: list[torch.Tensor]) -> list[float]:
    """Concatenate per device and copy once per device."""
    if not tensors:
        return []
    by_device: dict[torch.device, list[int]] = defaultdict(list)
    for i, t in enumerate(tensors):
        by_device[t.device].append(i)
    if len(by_device) == 1:
        return torch.cat(tensors).tolist()
    pieces: list[Optional[list[float]]] = [None] * len(tensors)
    for idx in by_device.values():
        flat = torch.cat([tensors[i] for i in idx]).tolist()
        j = 0
        for i in idx:
            n = tensors[i].numel()
            pieces[i] = flat[j:j + n]
            j += n
    return [v for piece in pieces for v in piece]  # type: ignore[union-attr]


def _place(rec: StepRecord, what: str, key: tuple, chunk: list[float]) -> None:
    if what == "loss":
        rec.loss = chunk[0]
    elif what == "cheap":
        site = key
        if not isinstance(rec.acts.get(site), ActStats):
            prev = rec.acts.get(site, 0.0)
            rec.acts[site] = prev + chunk[0]
    elif what == "full":
        if not isinstance(rec.acts.get(key), ActStats):
            rec.acts[key] = ActStats(1.0, *chunk)
    elif what == "grad":
        _accumulate(rec, key, chunk, "norm")
    elif what == "weight":
        _accumulate(rec, key, chunk, "weight_norm")
    elif what == "update":
        _accumulate(rec, key, chunk, "update_norm")


def _accumulate(rec: StepRecord, owners: tuple, norms: list[float], attr: str) -> None:
    """Per-parameter norms -> per-module norm (sqrt of sum of squares)."""
    sq: dict[tuple[str, str], float] = defaultdict(float)
    for owner, v in zip(owners, norms):
        sq[owner] += v * v
    for owner, s in sq.items():
        gs = rec.grads.get(owner)
        if gs is None:
            gs = rec.grads[owner] = GradStats(norm=None, numel=0)
        prev = getattr(gs, attr)
        setattr(gs, attr, s ** 0.5 if prev is None else (prev * prev + s) ** 0.5)

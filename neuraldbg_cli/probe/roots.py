"""Root models and their names: which model a module belongs to, and what each of its modules is observed
for. A root is decided once, when it is first called (or compiled), so the per-call hooks only look it up;
`rescan_root` lets parameters unfrozen later join in."""

from __future__ import annotations

import gc
import math
import weakref
from collections.abc import Callable
from typing import Any

import torch

from neuraldbg_cli.probe.provenance import items_of
from neuraldbg_cli.probe.tensorstats import (
    CHEAP_ONLY,
    DEAD,
    FINITE_PRESERVING,
    NORMS,
    RELU_LIKE,
    SAT_FLAGS,
    holds,
    is_sharded,
)
from neuraldbg_cli.trace.events import ModelInfo, ModuleInfo
from neuraldbg_cli.vocab import ACTIVATION_TYPES, is_norm

PARAMS, SAFE, OTHER = 0, 1, 2  # an observed module: has parameters; finite-preserving; anything else


def first_float(obj: Any, depth: int = 0) -> torch.Tensor | None:
    """The primary floating tensor of a module output (tensor, tuple, list, dict, dataclass-ish)."""
    if isinstance(obj, torch.Tensor):
        return obj if obj.is_floating_point() and obj.layout == torch.strided else None
    if depth > 2:
        return None
    for item in items_of(obj) or ():
        t = first_float(item, depth + 1)
        if t is not None:
            return t
    return None


# Wrappers that hold the user's model as one child: the attribute it is under. Their names are not the user's
# (`module.0`, `_orig_mod.fc`), so a root is named from inside them and the wrappers are only listed.
WRAPPERS = {
    "OptimizedModule": "_orig_mod",
    "DistributedDataParallel": "module",
    "DataParallel": "module",
    "FullyShardedDataParallel": "_fsdp_wrapped_module",
}
# Name segments that wrappers insert inside a model (FSDP's nested units, activation checkpointing)
WRAPPER_SEGMENTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


def unwrap(module: torch.nn.Module) -> tuple[torch.nn.Module, list[str]]:
    """The user's model inside torch.compile / DDP / DataParallel / FSDP wrappers, and the wrappers' classes."""
    wrappers: list[str] = []
    for _ in range(4):
        attr = WRAPPERS.get(type(module).__name__)
        inner = module.__dict__.get("_modules", {}).get(attr) if attr else None
        if not isinstance(inner, torch.nn.Module):
            break
        wrappers.append(type(module).__name__)
        module = inner
    return module, wrappers


def user_class(module: torch.nn.Module) -> tuple[str, list[str]]:
    """The model's class name, and "fully_shard" when FSDP2 sharded it: fully_shard swaps a module's class
    for a subclass named FSDP<Class>, whose other base is the user's class."""
    cls = type(module)
    if any(b.__name__ == "FSDPModule" for b in cls.__bases__):
        return next((b.__name__ for b in cls.__bases__ if b.__name__ != "FSDPModule"), cls.__name__), ["fully_shard"]
    return cls.__name__, []


def user_name(name: str) -> str:
    """A module's name as the user's model has it: `layers.0._fsdp_wrapped_module.fc` -> `layers.0.fc`."""
    if "_" not in name:
        return name
    return ".".join(part for part in name.split(".") if part not in WRAPPER_SEGMENTS)


def find_owner(module: torch.nn.Module) -> torch.nn.Module | None:
    """The model a part belongs to when the script calls `model.generator(z)` but never `model(...)`: the
    largest topmost nn.Module that has it among its submodules, so modules are named `generator.0` as in the
    model's named_modules(); None when it is part of no other module. Runs once per new root. Found by walking
    up through the garbage collector's referrers, not the calling frames: on Python < 3.13 reading a function
    frame's f_locals leaves a snapshot of all its locals on the frame, which keeps a model the script has
    deleted alive."""
    try:
        best, best_size, frontier, seen = None, 0, [module], {id(module)}
        for _ in range(16):  # levels up
            ups = _parents(frontier)
            tops = [m for m in frontier if id(m) not in ups and m is not module]
            for top in tops:
                size = sum(1 for _ in top.modules())
                if size > best_size:
                    best, best_size = top, size
            frontier = [p for ps in ups.values() for p in ps if id(p) not in seen]
            seen.update(map(id, frontier))
            if not frontier:
                break
        return best
    except Exception:  # noqa: BLE001 - naming is best effort
        return None


def _is_module(obj: Any) -> bool:
    return issubclass(type(obj), torch.nn.Module)  # the type only: no attribute of a foreign object is read


def _parents(children: list) -> dict[int, list]:
    """id(child) -> the modules that hold it in their `_modules` (one referrer scan per link of the chain:
    child <- _modules dict <- the parent, or <- the parent's __dict__ <- the parent)."""
    dicts = [
        r
        for r in gc.get_referrers(*children)
        if type(r) is dict and r and all(v is None or _is_module(v) for v in r.values())
    ]
    if not dicts:
        return {}
    ids = {id(d) for d in dicts}
    holders = gc.get_referrers(*dicts)
    parents = [h for h in holders if _is_module(h) and id(h.__dict__.get("_modules")) in ids]
    inst = [h for h in holders if type(h) is dict and id(h.get("_modules")) in ids]
    if inst:
        inst_ids = {id(d) for d in inst}
        parents += [o for o in gc.get_referrers(*inst) if _is_module(o) and id(o.__dict__) in inst_ids]
    out: dict[int, list] = {}
    for p in parents:
        for c in p.__dict__["_modules"].values():
            if any(c is child for child in children):
                out.setdefault(id(c), []).append(p)
    return out


class Root:
    """A root model: the outermost module called with gradients on. Names come from its named_modules().
    Holds its model, modules and parameters only weakly: neuraldbg keeps no model alive, and a dead model's
    `params` are empty (its description stays, for the trace)."""

    def __init__(self, name: str, module: torch.nn.Module, on_death: Callable[[Any], None] | None = None) -> None:
        self.name = name
        self.ref = weakref.ref(module, on_death)
        self.cls = type(module).__name__
        # module -> (name, flags, kind, key) when observed; its name (str) for a container (no params or compute)
        self.observed: weakref.WeakKeyDictionary[torch.nn.Module, Any] = weakref.WeakKeyDictionary()
        self.modules: dict[str, ModuleInfo] = {}
        self.prefs: list[tuple[str, weakref.ref]] = []  # trainable parameters, deduplicated: (module name, ref)
        self.order: list[str] = []
        self._ordered: set[str] = set()
        self.n_modules = 0
        self.n_params = 0
        self.wrappers: list[str] = []  # DDP, FSDP, torch.compile... around the model, outermost first
        self.facts: dict[str, Any] = {}  # architecture facts the forward pass showed (observer._fact)
        self.born: int | None = None  # steps completed when it was registered (registry._absorb)
        self.absorbed = False  # a part called while its model was being built: folded into that model

    @property
    def params(self) -> list[tuple[str, torch.nn.Parameter]]:
        """Its live trainable parameters as (module name, parameter); none once the model is gone."""
        if self.ref() is None:
            return []
        out = []
        for name, ref in self.prefs:
            p = ref()
            if p is not None:
                out.append((name, p))
        return out

    def info(self, optimized: set[int]) -> ModelInfo:
        """Its description for the run directory; `optimized` holds the ids of parameters some optimizer has."""
        for name, p in self.params:
            if id(p) in optimized:
                self.modules[name].in_optimizer = True
        return ModelInfo(
            name=self.name,
            cls=self.cls,
            modules=self.modules,
            n_modules=self.n_modules,
            n_params=self.n_params,
            order=list(self.order),
            wrappers=list(self.wrappers),
            facts=self._facts(),
        )

    def _facts(self) -> dict[str, Any]:
        """What the forward pass showed (residual blocks and their norm placement, attention layers), and the
        model's norm and activation types."""
        facts: dict[str, Any] = {k: dict(v) for k, v in self.facts.items()}
        module = self.ref()
        if module is not None:
            types = {type(m).__name__ for m in module.modules()}
            facts["norm_types"] = sorted(t for t in types if is_norm(t))
            facts["activation_types"] = sorted(types & ACTIVATION_TYPES)
        return facts


def _observe(root: Root, name: str, m: torch.nn.Module, own: bool) -> None:
    """How `m` is observed: statistics of its output (a layer with parameters, an activation), or only a
    non-finite check (a container: a NaN made in its own code)."""
    if not own and next(iter(m.children()), None) is not None:
        if name:
            root.observed[m] = name
        return
    tname = layer_type(m)
    flags = (DEAD if tname in RELU_LIKE else CHEAP_ONLY if tname in NORMS else 0) | SAT_FLAGS.get(tname, 0)
    kind = PARAMS if own else SAFE if tname in FINITE_PRESERVING else OTHER
    root.observed[m] = (name, flags, kind, (root.name, name, "output"))


def _describe(root: Root, name: str, m: torch.nn.Module, fresh: list) -> None:
    numel = sum(p.numel() for p in fresh)
    root.n_params += numel
    tname = layer_type(m)
    matrix = any(p.dim() >= 2 for p in fresh) and tname not in ("Embedding", "EmbeddingBag")
    info = root.modules.get(name)
    if info is None:
        gain = _init_gain(m, fresh) if matrix else None
        root.modules[name] = ModuleInfo(name=name, type=tname, params=numel, weight_ndim2=matrix, init_gain=gain)
    else:
        info.params += numel
        info.weight_ndim2 = info.weight_ndim2 or matrix


def _init_gain(m: torch.nn.Module, fresh: list) -> float | None:
    """std(weight) × sqrt(fan_in) of a layer's weight matrix or kernel as the script initialised it (read once,
    when the model is first seen, before any update): its scale against what init schemes set (PyTorch's
    default 0.58, Xavier 0.3-1.4, He 1.41), so that a rule can tell a symptom the init explains from one it
    does not. None for a sharded, meta or single-element weight."""
    # its own registered weight only: a parametrized layer's `weight` is a property that runs the
    # parametrization (spectral_norm's power iteration updates its u/v buffers), which reading must not do
    w = m.__dict__.get("_parameters", {}).get("weight")
    if not isinstance(w, torch.Tensor) or not any(w is p for p in fresh):
        return None
    if w.dim() < 2 or w.numel() < 2 or w.is_meta or is_sharded(w):
        return None
    try:
        return float(w.detach().float().std()) * math.sqrt(w[0].numel())  # fan_in: inputs × kernel size
    except Exception:  # noqa: BLE001 - an exotic tensor type: no reading, no harm
        return None


Claim = Callable[[Root, str, torch.nn.Parameter], bool]


PARAMETRIZED = ".parametrizations."


def layer_type(m: torch.nn.Module) -> str:
    """The class the user built: register_parametrization swaps a layer's class for `Parametrized<Class>`, a
    subclass of it made on the fly (a ParametrizedLinear is a Linear to every rule)."""
    cls = type(m)
    if cls.__name__.startswith("Parametrized") and "parametrizations" in m.__dict__.get("_modules", {}):
        return cls.__bases__[0].__name__
    return cls.__name__


def parametrized_owner(name: str, m: torch.nn.Module) -> str | None:
    """For a torch.nn.utils.parametrize ParametrizationList (`conv.parametrizations.weight`: weight_norm's
    original0/original1, spectral_norm's original), the name of the layer whose tensor it computes (`conv`),
    else None. Why: the user's layer is the Linear/Conv whose `weight` it is; the list is no layer (its output
    is that weight, not an activation), and a layer split in two (its bias alone here, its weight there) reads
    wrong on both sides: under a hinge or Wasserstein loss the last layer's bias gradient is exactly 0 by
    symmetry (the real and fake terms cancel), which alone looks like a cut graph."""
    if type(m).__name__ != "ParametrizationList" or PARAMETRIZED not in f".{name}":
        return None
    return f".{name}".rsplit(PARAMETRIZED, 1)[0][1:]


def scan_root(root: Root, module: torch.nn.Module, index: weakref.WeakKeyDictionary, claim: Claim) -> None:
    """A new root's modules: each goes into `index` (unless another root has it), and is observed as
    `_observe` decides, once; `claim(root, name, p)` takes each trainable parameter no other root has (a
    parametrization's, under the layer it parametrizes: see parametrized_owner)."""
    by_name: dict[str, torch.nn.Module] = {}
    for name, m in module.named_modules():
        name = user_name(name)
        by_name[name] = m
        root.n_modules += 1
        if m not in index:
            index[m] = (root, name)
        own = [p for p in m.parameters(recurse=False) if p.requires_grad and holds(p)]  # (an empty shard: no)
        layer = parametrized_owner(name, m)
        if layer is not None and layer in by_name:
            if own and not isinstance(root.observed.get(by_name[layer]), tuple):
                _observe(root, layer, by_name[layer], True)  # a layer whose only parameter is parametrized
            _describe(root, layer, by_name[layer], [p for p in own if claim(root, layer, p)])
            continue
        _observe(root, name, m, bool(own))
        if isinstance(root.observed.get(m), tuple):
            _describe(root, name, m, [p for p in own if claim(root, name, p)])


def rescan_root(
    root: Root, index: weakref.WeakKeyDictionary, claim: Claim, claimed: Callable[[torch.nn.Parameter], bool]
) -> bool:
    """Parameters unfrozen or added after the model was first seen (staged fine-tuning, a replaced head)
    join in; a sampled step is often enough for that. True when any did."""
    module = root.ref()
    if module is None or all(claimed(p) or not p.requires_grad or not holds(p) for p in module.parameters()):
        return False
    changed = False
    by_name: dict[str, torch.nn.Module] = {}
    for name, m in module.named_modules():
        name = user_name(name)
        by_name[name] = m
        new = [p for p in m.parameters(recurse=False) if p.requires_grad and not claimed(p) and holds(p)]
        if m not in index:
            index[m] = (root, name)
        if not new:
            continue
        layer = parametrized_owner(name, m)
        if layer is not None and layer in by_name:
            name, m = layer, by_name[layer]
        fresh = [p for p in new if claim(root, name, p)]
        entry = root.observed.get(m)
        flags = entry[1] if isinstance(entry, tuple) else 0
        root.observed[m] = (name, flags, PARAMS, (root.name, name, "output"))
        _describe(root, name, m, fresh)
        changed = changed or bool(fresh)
    return changed

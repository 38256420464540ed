"""Root models and their names: which model a module belongs to, and what each of its modules is observed
for. A root is decided once, when it is first called (or compiled), so the per-call hooks only look it up;
`rescan_root` lets parameters unfrozen later join in."""
from __future__ import annotations

import os
import sys
import weakref
from typing import Any, Optional

import torch

from neuraldbg_cli.events import ModelInfo, ModuleInfo
from neuraldbg_cli.tensorstats import CHEAP_ONLY, DEAD, FINITE_PRESERVING, NORMS, RELU_LIKE, SAT_FLAGS

PARAMS, SAFE, OTHER = 0, 1, 2  # an observed module: has parameters; finite-preserving; anything else


def first_float(obj: Any, depth: int = 0) -> Optional[torch.Tensor]:
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
        t = first_float(item, depth + 1)
        if t is not None:
            return t
    return None


def compiled_inner(module: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The model inside a torch.compile(model) wrapper (an OptimizedModule), else None."""
    inner = module.__dict__.get("_modules", {}).get("_orig_mod") if type(module).__name__ == "OptimizedModule" else None
    return inner if isinstance(inner, torch.nn.Module) else None


_SKIP_FRAMES = (os.path.dirname(torch.__file__), os.path.dirname(__file__))  # torch's and every neuraldbg module's


def find_owner(module: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The model a part belongs to when the script calls `model.generator(z)` but never `model(...)`:
    the largest nn.Module held in the calling frames (locals, or attributes of `self`) that contains it,
    so modules are named `generator.0` as in the model's named_modules(). Runs once per new root.
    Call it straight from a hook or wrapper: the search starts at that function's caller."""
    try:
        return _search_frames(module, sys._getframe(2))
    except Exception:  # noqa: BLE001 - naming is best effort
        return None


def _search_frames(module: torch.nn.Module, frame: Any) -> Optional[torch.nn.Module]:
    best, best_size = None, 0
    for _ in range(12):
        if frame is None:
            break
        if not frame.f_code.co_filename.startswith(_SKIP_FRAMES):
            values = list(frame.f_locals.values())
            values += [v for obj in values if not isinstance(obj, torch.nn.Module) and hasattr(obj, "__dict__")
                       and not isinstance(obj, type) for v in list(vars(obj).values())[:50]]
            for cand in values:
                if isinstance(cand, torch.nn.Module) and cand is not module:
                    mods = list(cand.modules())
                    if len(mods) > best_size and any(m is module for m in mods):
                        best, best_size = cand, len(mods)
        frame = frame.f_back
    return best


class Root:
    """A root model: the outermost module called with gradients on. Names come from its named_modules()."""

    def __init__(self, name: str, module: torch.nn.Module) -> None:
        self.name = name
        self.ref = weakref.ref(module)
        self.cls = type(module).__name__
        self.observed: dict[int, tuple[str, int, int, tuple]] = {}  # id(module) -> (name, flags, kind, key)
        self.containers: dict[int, str] = {}  # id(module) -> name, modules without own params or compute
        self.modules: dict[str, ModuleInfo] = {}
        self.params: list[tuple[str, torch.nn.Parameter]] = []  # trainable, deduplicated
        self.order: list[str] = []
        self._ordered: set[str] = set()
        self.n_modules = 0
        self.n_params = 0

    def info(self, optimized: set[int]) -> ModelInfo:
        """Its description for the run directory; `optimized` holds the ids of parameters some optimizer has."""
        for name, p in self.params:
            if id(p) in optimized:
                self.modules[name].in_optimizer = True
        return ModelInfo(name=self.name, cls=self.cls, modules=self.modules, n_modules=self.n_modules,
                         n_params=self.n_params, order=list(self.order))


def register_root(module: torch.nn.Module, class_count: dict[str, int], index: dict[int, tuple[Root, str]],
                  pinfo: dict[int, tuple[str, str]]) -> Root:
    """A new root for `module`, named by its class: its modules go into `index`, and its trainable
    parameters no other root has into `pinfo`. Decides here, once, how each module is observed."""
    wrapper, module = module, compiled_inner(module) or module  # torch.compile(model): name the model itself
    cls = type(module).__name__
    k = class_count[cls]
    class_count[cls] += 1
    root = Root(cls if k == 0 else f"{cls}#{k}", module)
    for name, m in module.named_modules():
        root.n_modules += 1
        index.setdefault(id(m), (root, name))
        own = [p for p in m.parameters(recurse=False) if p.requires_grad]
        leaf = next(iter(m.children()), None) is None
        if not own and not leaf:
            if name:
                root.containers[id(m)] = name  # only a non-finite check: a NaN made in its own code
            continue
        tname = type(m).__name__
        flags = (DEAD if tname in RELU_LIKE else CHEAP_ONLY if tname in NORMS else 0) | SAT_FLAGS.get(tname, 0)
        kind = PARAMS if own else SAFE if tname in FINITE_PRESERVING else OTHER
        root.observed[id(m)] = (name, flags, kind, (root.name, name, "output"))
        fresh = [p for p in own if id(p) not in pinfo]
        for p in fresh:
            pinfo[id(p)] = (root.name, name)
            root.params.append((name, p))
        numel = sum(p.numel() for p in fresh)
        root.n_params += numel
        is_matrix = any(p.dim() >= 2 for p in fresh) and tname not in ("Embedding", "EmbeddingBag")
        root.modules[name] = ModuleInfo(name=name, type=tname, params=numel, weight_ndim2=is_matrix)
    index.setdefault(id(wrapper), (root, ""))
    return root


def rescan_root(root: Root, pinfo: dict[int, tuple[str, str]]) -> bool:
    """Parameters unfrozen or added after the model was first seen (staged fine-tuning) join in;
    a sampled step is often enough for that. True when any did."""
    module = root.ref()
    if module is None or all(id(p) in pinfo or not p.requires_grad for p in module.parameters()):
        return False
    changed = False
    for name, m in module.named_modules():
        new = [p for p in m.parameters(recurse=False) if p.requires_grad and id(p) not in pinfo]
        if not new:
            continue
        for p in new:
            pinfo[id(p)] = (root.name, name)
            root.params.append((name, p))
        numel = sum(p.numel() for p in new)
        root.n_params += numel
        tname = type(m).__name__
        matrix = any(p.dim() >= 2 for p in new) and tname not in ("Embedding", "EmbeddingBag")
        info = root.modules.get(name)
        if info is None:
            root.modules[name] = ModuleInfo(name=name, type=tname, params=numel, weight_ndim2=matrix)
        else:
            info.params += numel
            info.weight_ndim2 = info.weight_ndim2 or matrix
        flags = root.observed.get(id(m), (name, 0))[1]
        root.observed[id(m)] = (name, flags, PARAMS, (root.name, name, "output"))
        root.containers.pop(id(m), None)
        changed = True
    return changed

"""Residual blocks on sampled steps: a module whose output is its input plus a branch, read from the forward pass.

A block is found from its output's autograd node: an addition one of whose terms is the block's input (through
up to four additions: a Pre-LN block adds an attention branch, then an MLP branch), possibly followed by one
pointwise op (ResNet's relu(x + f(x))) or a normalisation (Post-LN: norm(x + f(x))). When the input needs no
gradient (the first block over raw data), the node cannot name it; a known block type (vocab.is_residual) whose
addition has a term without gradient is taken then. torch.nn's Transformer layers say their norm placement
(`norm_first`); other blocks' placement is read off the graph: the sum normalised is Post-LN, a norm inside the
branch is Pre-LN.

What is measured, on the block's device as 0-d tensors (one subtraction and three norms per block): the RMS of
the input (the skip path), of output - input (the branch) and of the output (the residual stream after it). A
Post-LN block's output is not input + branch, so only its placement is recorded."""

from __future__ import annotations

import math
import weakref
from typing import Any, NamedTuple

import torch

from neuraldbg_cli.probe import tensorstats as ts
from neuraldbg_cli.vocab import is_norm, is_residual

NORM_FIRST_TYPES = ("TransformerEncoderLayer", "TransformerDecoderLayer")  # their `norm_first` says the placement
POINTWISE_NODES = frozenset(
    {"ReluBackward0", "ReluBackward1", "GeluBackward0", "SiluBackward0", "LeakyReluBackward0", "LeakyReluBackward1"}
)
MAX_ADDS = 4  # additions walked through from the output to find the input among the terms


class ResidLayout(NamedTuple):
    """One residual entry's facts (host side): its values are [skip_rms, branch_rms, out_rms] when `measured`."""

    type: str
    norm: str  # "pre" | "post" | "none"
    found: str  # "graph" | "type"
    measured: bool


def _is_add(node: Any) -> bool:
    return node is not None and node.name().startswith("AddBackward")


def _is_input(fn: Any, x: torch.Tensor) -> bool:
    if x.grad_fn is not None:
        return fn is x.grad_fn
    if x.requires_grad:  # a leaf: its AccumulateGrad node holds it
        return fn is not None and getattr(fn, "variable", None) is x
    return False


def _adds_input(node: Any, x: torch.Tensor, depth: int = 0) -> bool:
    """`node` is an addition with `x` among its terms, directly or through further additions."""
    for fn, _ in node.next_functions:
        if _is_input(fn, x):
            return True
        if depth + 1 < MAX_ADDS and _is_add(fn) and _adds_input(fn, x, depth + 1):
            return True
    return False


def _adds_constant(node: Any, depth: int = 0) -> bool:
    """`node` is an addition one of whose terms needs no gradient (directly or through further additions)."""
    for fn, _ in node.next_functions:
        if fn is None:
            return True
        if depth + 1 < MAX_ADDS and _is_add(fn) and _adds_constant(fn, depth + 1):
            return True
    return False


def skip_of(out: torch.Tensor, x: torch.Tensor, type_name: str) -> tuple[str, str] | None:
    """How `out` adds `x`: (placement hint, found) with placement "add" (out = x + branch, maybe through one
    pointwise op) or "post" (a norm of the sum), found "graph" or "type"; None when it does not."""
    node: Any = out.grad_fn
    if node is None:
        return None
    name, how = node.name(), "add"
    top: Any = node
    if not _is_add(node):
        nf = node.next_functions
        inner = nf[0][0] if nf else None
        if not _is_add(inner) or not (name in POINTWISE_NODES or "Norm" in name):
            return None
        top, how = inner, "post" if "Norm" in name else "add"
    if _adds_input(top, x):
        return how, "graph"
    if not x.requires_grad and is_residual(type_name) and _adds_constant(top):
        return how, "type"
    return None


_NORMED: weakref.WeakKeyDictionary[torch.nn.Module, bool] = weakref.WeakKeyDictionary()


def _has_norm(module: torch.nn.Module) -> bool:
    """A normalisation layer among the block's descendants (a Pre-LN branch). Read once per block: walking
    module.modules() each sampled step cost more than the block's three norms."""
    found = _NORMED.get(module)
    if found is None:
        found = _NORMED[module] = any(is_norm(type(m).__name__) for m in module.modules() if m is not module)
    return found


def values(
    module: torch.nn.Module, x: torch.Tensor | None, out: torch.Tensor | None
) -> tuple[list[torch.Tensor], ResidLayout] | None:
    """0-d device tensors for one residual block and their layout; None when the module is no residual block
    (its output does not add its input, or the shapes differ)."""
    if x is None or out is None or out is x or out.shape != x.shape or x.numel() == 0:
        return None
    tname = type(module).__name__
    if tname in NORM_FIRST_TYPES and getattr(module, "norm_first", None) is False:
        return [], ResidLayout(tname, "post", "type", False)  # norm2(x1 + ff(x1)), x1 = norm1(x + sa(x))
    found = skip_of(out, x, tname)
    if found is None:
        return None
    how, where = found
    if tname in NORM_FIRST_TYPES:
        norm = "pre"
    elif how == "post":
        norm = "post"
    else:
        norm = "pre" if _has_norm(module) else "none"
    if how == "post":
        return [], ResidLayout(tname, norm, where, False)
    with torch.no_grad():
        xf = x.detach().float()
        of = out.detach().float()
        # RMS through the project's overflow-safe norms (a growing stream is what is looked for: it must not
        # read as inf while its values are finite), one fused call for the three
        per = 1.0 / math.sqrt(max(1, xf.numel()))
        vals = list(torch._foreach_mul(ts.norms([xf.reshape(-1), (of - xf).reshape(-1), of.reshape(-1)]), per))
    return vals, ResidLayout(tname, norm, where, True)

"""Loss calls on sampled steps: what goes into the loss, for the bugs that sit between the head and the loss.

They are silent: `mse_loss` of a [N, 1] prediction against a [N] target broadcasts to [N, N] (torch only
warns) and fits every prediction to the batch mean; softmax before `cross_entropy` (or sigmoid before
`binary_cross_entropy_with_logits`) squashes the gradient and stalls the loss; raw scores into `nll_loss`
(which takes log-probabilities, all <= 0) push the loss down without bound; a `reduction="sum"` scales every
gradient by the number of terms. What that takes is read at the call: the host-side facts (shapes, the shape
they broadcast to, reduction, dtype) cost nothing; on the input's device, as 0-d tensors that travel home with
the step's other statistics (records.py), its min and max over an evenly spread sample (tensorstats.sample:
no full pass over a large vocabulary's logits) and, for the losses that read a class dim, the largest
|sum over classes - 1| over a few leading rows (rows summing to 1 with min >= 0 are probabilities).
Class targets out of range are not read: torch raises on them by itself (IndexError on the CPU, a
device-side assert on CUDA)."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from neuraldbg_cli.probe import tensorstats as ts

# losses whose target is elementwise against the input, so a target of another shape broadcasts silently
# (binary_cross_entropy[_with_logits] raise on a size mismatch; gaussian_nll_loss has shape rules of its own)
ELEMENTWISE = frozenset({"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "poisson_nll_loss"})
# losses that read a class dim of the input (dim 1, or 0 for an unbatched input), and kl_div (the last dim)
CLASS_LOSSES = ("cross_entropy", "nll_loss")
PRIOR_CLASSES = 256  # class losses over at most this many classes count their labels (see label_counts)
# torch.nn.functional losses observed (besides provenance.FLOAT_TARGET_LOSSES, whose targets are also data);
# ctc_loss takes log-probabilities (time, batch, classes), like nll_loss
EXTRA_LOSSES = (*CLASS_LOSSES, "ctc_loss")
ROW_ELEMENTS = 1 << 12  # elements behind the row sums: whole rows up to this many values (at least one row)

# loss modules -> the functional loss they call (subclasses map as their base: NLLLoss2d is an NLLLoss)
MODULE_LOSSES: dict[type, str] = {
    nn.CrossEntropyLoss: "cross_entropy",
    nn.NLLLoss: "nll_loss",
    nn.MSELoss: "mse_loss",
    nn.L1Loss: "l1_loss",
    nn.SmoothL1Loss: "smooth_l1_loss",
    nn.HuberLoss: "huber_loss",
    nn.BCELoss: "binary_cross_entropy",
    nn.BCEWithLogitsLoss: "binary_cross_entropy_with_logits",
    nn.KLDivLoss: "kl_div",
    nn.PoissonNLLLoss: "poisson_nll_loss",
    nn.GaussianNLLLoss: "gaussian_nll_loss",
    nn.CTCLoss: "ctc_loss",
}


class LossLayout(NamedTuple):
    """What one loss call's values are (host side), and the facts read at the call."""

    name: str  # the functional loss (a module's: see MODULE_LOSSES)
    module: str | None  # the loss module's class (None: called as a function)
    input_shape: tuple[int, ...]
    target_shape: tuple[int, ...] | None
    broadcast_shape: tuple[int, ...] | None  # what input and target broadcast to, when not the input's shape
    reduction: str
    dtype: str
    classes: int | None  # size of the class dim (class losses and kl_div)
    terms: int  # values the reduction adds up (per class-loss row: one term)
    row_sums: bool  # the values end with max |row sum - 1|
    source: str | None  # the op that made the input (see source_op)
    one_class: bool = False  # the values end with (all targets one class, the first target): class indices (N,)


def module_loss(module: nn.Module) -> str | None:
    """The functional loss a loss module calls, by its class (or a base class)."""
    for cls in type(module).__mro__:
        name = MODULE_LOSSES.get(cls)
        if name is not None:
            return name
    return None


def loss_input(args: tuple, kwargs: dict) -> torch.Tensor | None:
    """A loss call's input: `input=`, else the first positional argument."""
    x = kwargs.get("input", kwargs.get("log_probs")) if kwargs else None  # ctc_loss names it log_probs
    if x is None and args:
        x = args[0]
    return x if isinstance(x, torch.Tensor) else None


def _class_dim(name: str, x: torch.Tensor) -> int | None:
    if name in CLASS_LOSSES:
        return 1 if x.dim() >= 2 else 0 if x.dim() == 1 else None
    if name in ("kl_div", "ctc_loss"):
        return x.dim() - 1 if x.dim() >= 1 else None
    return None


def _broadcast(x: torch.Tensor, t: torch.Tensor | None) -> tuple[int, ...] | None:
    if t is None or t.shape == x.shape:
        return None
    try:
        shape = tuple(torch.broadcast_shapes(x.shape, t.shape))
    except RuntimeError:  # torch itself raises at the call
        return None
    return shape if shape != tuple(x.shape) else None


# autograd nodes that only move or reshape values: the op that made a loss input is looked for behind them
_SHAPE_OPS = frozenset(
    f"{op}Backward0"
    for op in (
        "View",
        "Reshape",
        "UnsafeView",
        "Squeeze",
        "Unsqueeze",
        "Select",
        "Slice",
        "Expand",
        "Permute",
        "Transpose",
        "T",
        "Clone",
        "Flatten",
        "Narrow",
        "Index",
        "Unbind",
        "Split",
        "SplitWithSizes",
        "ToCopy",
    )
)


def label_counts(name: str, x: torch.Tensor, t: torch.Tensor | None) -> torch.Tensor | None:
    """How many of a class loss's targets fall in each class (a 1-d device tensor of its C counts), for class
    indices with C <= PRIOR_CLASSES: the labels' own frequencies, whose entropy is what a model that ignores its
    inputs scores. A scatter, not a bincount (whose size depends on the data: a device sync); targets out of range
    (ignore_index) go to a bin of their own, dropped."""
    if name not in CLASS_LOSSES or t is None or t.is_floating_point() or t.numel() == 0:
        return None
    dim = _class_dim(name, x)
    classes = int(x.shape[dim]) if dim is not None else 0
    if not 2 <= classes <= PRIOR_CLASSES or t.numel() * classes != x.numel():
        return None
    td = t.detach().reshape(-1).long()
    idx = torch.where((td >= 0) & (td < classes), td, classes)
    counts = torch.zeros(classes + 1, dtype=torch.float32, device=td.device)
    counts.scatter_add_(0, idx, torch.ones_like(idx, dtype=torch.float32))
    return counts[:classes]


def source_op(x: torch.Tensor) -> str | None:
    """The autograd op that made `x`, looked for behind reshapes and copies (`D(x).view(-1)` was made by D's
    last op): "Sigmoid", "Softmax", "LogSoftmax", "Addmm"... None when `x` carries no graph (no gradient).
    Reading the graph is host-side and syncs nothing; it tells a sigmoid's output from logits that happen to
    lie in [0, 1], which no range test can."""
    node = x.grad_fn
    for _ in range(8):
        if node is None:
            return None
        name = type(node).__name__
        if name not in _SHAPE_OPS:
            return name.removesuffix("Backward0").removesuffix("Backward1")
        node = next((n for n, _ in node.next_functions if n is not None), None)
    return None


MIN_BATCH = 8  # class targets a batch needs before "all one class" says anything (two classes, 8 draws: 1%)


def values(
    name: str, x: torch.Tensor, t: torch.Tensor | None, reduction: str, module: str | None = None
) -> tuple[list[torch.Tensor], LossLayout] | None:
    """0-d device tensors for one loss call, and their layout: [min, max] of the input (over a sample), then
    max |row sum - 1| for the losses with a class dim, then for a class loss fed class indices (N,): whether all
    are one class, and the first. None when the input is no float tensor."""
    if not x.is_floating_point() or x.numel() == 0:
        return None
    xd = x.detach()
    part = ts.sample(xd.reshape(-1))
    part = part.float() if part.dtype != torch.float32 else part
    lo, hi = torch.aminmax(part)
    out = [lo, hi]
    dim = _class_dim(name, xd)
    classes = int(xd.shape[dim]) if dim is not None else None
    if dim is not None and classes:
        lead = xd if dim == 0 else xd[: max(1, ROW_ELEMENTS // max(1, xd[:1].numel()))]
        sums = lead.sum(dim=dim, dtype=torch.float32)
        out.append((sums - 1).abs().amax())
    one_class = False
    if name in CLASS_LOSSES and t is not None and t.dim() == 1 and t.numel() >= MIN_BATCH and not t.is_floating_point():
        td = t.detach()  # class indices of a classifier's batch: all one class? (read with the step's values)
        out += [(td == td[0]).all().float(), td[0].float()]
        one_class = True
    if name == "ctc_loss":  # one term per utterance: (time, batch, classes), or (time, classes) unbatched
        terms = int(xd.shape[1]) if xd.dim() == 3 else 1
    else:
        terms = xd.numel() // classes if classes and name in CLASS_LOSSES else xd.numel()
    tshape = tuple(t.shape) if t is not None else None
    bshape = _broadcast(xd, t) if name in ELEMENTWISE else None
    dtype = str(xd.dtype).removeprefix("torch.")
    rows = dim is not None and bool(classes)
    lay = LossLayout(
        name, module, tuple(xd.shape), tshape, bshape, reduction, dtype, classes, terms, rows, source_op(x), one_class
    )
    return out, lay

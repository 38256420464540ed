"""One thread's place in a forward pass, shared by the forward observer (which moves it) and the readers it
feeds (which read the layer, the last output and a pending attention call). Apart so that neither imports the
other."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from neuraldbg_cli.probe.roots import Root


class ForwardThread:
    """One thread's place in the forward pass."""

    __slots__ = ("depth", "base", "root", "layer", "out", "attn")

    def __init__(self) -> None:
        self.depth = 0  # module calls under way in this thread
        self.base = 0  # 1 in a thread that joined another thread's call (its calls end there), else 0
        self.root: Root | None = None  # the trained root whose forward this is
        self.layer: str | None = None  # the last layer with parameters seen: an activation is attributed to it
        self.out: torch.Tensor | None = None  # the last output seen
        self.attn: tuple | None = None  # sampled steps: (depth, values, layout) of an attention call to attribute

"""Normalisation layers on sampled steps: what a BatchNorm's running statistics say against the batch it sees.

A BatchNorm's harm is silent: in eval mode while its model trains it normalises with frozen (often never
updated) running statistics; a NaN/Inf batch poisons `running_var` for every eval-mode forward afterwards
while the training loss looks fine; a batch with a handful of values per channel makes its statistics noise.
What that takes is read here, on the layer's device, as 0-d tensors that travel home with the step's other
statistics (records.py): per channel, the batch mean and variance of the layer's input against the running
ones, whether the running statistics are finite and whether they are still exactly at their initial values
(0 and 1: the layer never ran in training mode); for every norm with a gain, the gain's RMS. The host-side
facts (mode, momentum, values per channel) come from the module itself and cost nothing."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.nn.modules.batchnorm import _BatchNorm


class NormLayout(NamedTuple):
    """What one norm entry's values are (host side), and the facts read off the module."""

    type: str
    training: bool  # the module's mode at the (first) observed call of the step
    trainable: bool  # it has parameters that require a gradient
    momentum: float | None  # BatchNorm's momentum (None: cumulative average, or not a BatchNorm)
    per_channel: int  # values behind each channel's batch statistics (0: not a BatchNorm with running stats)
    batch: int  # the batch size behind them (the input's first dim)
    running: bool  # the values include the running-statistics part (see `values`)
    gain: bool  # the values end with the gain's RMS


_INITIAL: dict[torch.device, torch.Tensor] = {}


def _initial(device: torch.device) -> torch.Tensor:
    """[[0], [1]]: a BatchNorm's initial running mean and variance, made once per device."""
    t = _INITIAL.get(device)
    if t is None:
        t = _INITIAL[device] = torch.tensor([[0.0], [1.0]], device=device)
    return t


def values(module: torch.nn.Module, x: torch.Tensor | None) -> tuple[list[torch.Tensor], NormLayout] | None:
    """0-d device tensors for one norm layer, and their layout; None when there is nothing to read. The running
    part is [finite, initial, shift, log_scale, tracked]: shift = median over channels of |mu_batch - mu_running|
    / sigma_running, log_scale = median of |ln(var_batch / var_running)| (both 0 for statistics that describe the
    batch; a frozen layer fed other data drifts from 0); tracked = num_batches_tracked (how long the running
    statistics have averaged, -1 when the layer does not count)."""
    weight = getattr(module, "weight", None)
    gain = isinstance(weight, torch.Tensor) and weight.numel() > 0
    # module.parameters(recurse=False), without its generator machinery (a tenth of the time)
    trainable = any(p is not None and p.requires_grad for p in module._parameters.values())
    out: list[torch.Tensor] = []
    per_channel, batch, running, momentum = 0, 0, False, None
    if isinstance(module, _BatchNorm):
        momentum = module.momentum
        rm, rv = module.running_mean, module.running_var
        if rm is not None and rv is not None and x is not None and x.dim() >= 2 and x.shape[1] == rm.numel():
            running = True
            per_channel = x.numel() // max(1, x.shape[1])
            batch = x.shape[0]
            eps = float(module.eps)
            xf = x.detach()
            xf = xf.float() if xf.dtype != torch.float32 else xf
            # per channel over (batch, positions): two passes of plain reductions on an (N, C, rest) view (on
            # the CPU var_mean over non-adjacent dims took 6x as long as both passes together)
            v = xf.reshape(xf.shape[0], xf.shape[1], -1)
            mu_b = v.mean(dim=(0, 2))
            var_b = torch.linalg.vector_norm(v - mu_b[None, :, None], dim=(0, 2)).square() / (v.shape[0] * v.shape[2])
            rmf, rvf = rm.detach().float(), rv.detach().float()
            both = torch.stack([rmf, rvf])  # (2, C): one op per test instead of one per tensor
            finite = torch.isfinite(both).all()
            initial = (both == _initial(both.device)).all()
            rv_eps = rvf + eps
            shift = ((mu_b - rmf).abs() / rv_eps.sqrt()).median()
            log_scale = ((var_b + eps).log() - rv_eps.log()).abs().median()
            n = module.num_batches_tracked
            tracked = n.detach().float() if isinstance(n, torch.Tensor) else torch.full_like(shift, -1.0)
            out += [finite.float(), initial.float(), shift, log_scale, tracked]
    if gain:
        w = weight.detach()  # type: ignore[union-attr]
        out.append(torch.linalg.vector_norm(w.float() if w.dtype != torch.float32 else w) / (w.numel() ** 0.5))
    if not out:
        return None
    lay = NormLayout(
        type(module).__name__, bool(module.training), trainable, momentum, per_channel, batch, running, gain
    )
    return out, lay

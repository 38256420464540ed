"""On-device statistics of one tensor, and the single device->host transfer they go home in.

Every statistic is a 0-d tensor computed where the tensor lives; nothing here syncs with the device. The
work is memory-bound, so each function reads a tensor as few times as possible (BENCHMARKS.md has the
numbers): a layer output costs two reductions (sum, sum of squares), an activation adds min/max and a
per-unit max for dead units; the rest (min, the fractions of exact zeros and of values near a rail) is
measured on a fixed-size sample of the tensor, which is all a fraction compared with a threshold needs."""

from __future__ import annotations

import math
from collections import defaultdict
from typing import TYPE_CHECKING, NamedTuple, TypeGuard

import torch

from neuraldbg_cli.trace.events import ActStats
from neuraldbg_cli.vocab import (
    CHANNEL_FIRST_TYPES,
    FEATURES_LAST_TYPES,
    FINITE_PRESERVING_TYPES,
    NORM_TYPES,
    RELU_TYPES,
    SAT01_TYPES,
    SAT11_TYPES,
    SATURATING_TYPES,
)

if TYPE_CHECKING:  # types only: nothing here imports torch.distributed at run time
    from torch.distributed.tensor import DTensor

# which statistics a site needs, beyond sum / sum of squares / min / max
DEAD, SAT01, SAT11, EXACT = 1, 2, 4, 8  # units never > 0; near 0 or 1; near -1 or 1; two-pass std + finite count
SAT = SAT01 | SAT11
CHEAP_ONLY = 16  # a normalisation layer: its output's scale is what it controls, so only the NaN check
# where an activation's units (channels, features) lie, from the type of the layer it follows: dim 1 of
# (N, C, ...) or the last dim of (..., features). Neither: dim 1 of a 4-d/5-d tensor (an image-like map),
# else the last dim
CHANNEL_FIRST, FEATURES_LAST = 32, 64

# the rails each saturating activation's output is measured at, from the shared table (vocab)
SAT_FLAGS = {t: (SAT01 if t in SAT01_TYPES else 0) | (SAT11 if t in SAT11_TYPES else 0) for t in SATURATING_TYPES}
# the shared tables under the names roots.py reads: DEAD for these, CHEAP_ONLY for norms; and when a module's input
# is the output just checked, one that preserves finiteness needs no non-finite check of its own
RELU_LIKE, NORMS, FINITE_PRESERVING = RELU_TYPES, NORM_TYPES, FINITE_PRESERVING_TYPES


def unit_axis_flags(layer_type: str | None) -> int:
    """CHANNEL_FIRST / FEATURES_LAST for an activation that follows a module of this type (0: unknown)."""
    if layer_type in CHANNEL_FIRST_TYPES:
        return CHANNEL_FIRST
    return FEATURES_LAST if layer_type in FEATURES_LAST_TYPES else 0


def unit_axis(ndim: int, flags: int) -> int:
    """The dim of an activation's units (see CHANNEL_FIRST); a 2-d (N, units) tensor is the same either way."""
    if flags & CHANNEL_FIRST:
        return 1
    if flags & FEATURES_LAST:
        return ndim - 1
    return 1 if ndim in (4, 5) else ndim - 1


SAMPLE_BLOCK = 256  # contiguous elements per sampled block (whole cache lines, and a token's features)
SAMPLE = 1 << 14  # elements behind a fraction (and an activation's min): standard error at most 0.4 points
SCRATCH_KEEP = 2 * SAMPLE  # elements of the CPU scratch tensor for the counts, kept and reused


class Layout(NamedTuple):
    """What the values of one `full()` call are, for the host side."""

    n: int  # elements
    sampled: int  # elements behind the fractions
    units: int  # units behind dead_frac (0: not measured)
    flags: int


# Overflow. The tool's own statistics must not turn finite values into inf (a gradient of 1e23 would read as a
# NaN): a float32 sum of squares overflows once the RMS passes ~1.8e19, and an fp16 result once it passes 65504.
# On CUDA the reductions accumulate in float64 (`dtype=`: one pass, no copy, the same memory traffic; its norms
# then differ from float32 accumulation in the last bits). On the CPU float64 reductions cost up to 10x (the input
# is converted), so the float32 result is kept (bit for bit as before) and an infinite one, which is rare and free
# to read there (no device to wait for), is recomputed in float64: it stays inf only when the tensor holds an inf
# (a NaN result is not recomputed: only NaN/Inf values make one). Other devices (MPS has no float64) reduce in
# float32 at least.
WIDE = {"cuda"}
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def norms(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
    """The L2 norm of each tensor (0-d), overflow-safe for finite values (see WIDE), with no host sync off the CPU."""
    if not tensors:
        return []
    kind = tensors[0].device.type
    real = all(t.dtype in _FLOATS for t in tensors)
    if kind in WIDE and real:
        return list(torch._foreach_norm(tensors, 2, dtype=torch.float64))
    if kind != "cpu":
        narrow = real and all(t.dtype != torch.float64 for t in tensors)
        return list(torch._foreach_norm(tensors, 2, dtype=torch.float32) if narrow else torch._foreach_norm(tensors))
    out = list(torch._foreach_norm(tensors))
    if out:
        same = all(n.dtype is torch.float32 for n in out)  # (the usual case: no per-norm cast before the stack)
        for i, v in enumerate(torch.stack(out if same else [n.float() for n in out]).tolist()):
            if math.isinf(v) and tensors[i].is_floating_point():
                out[i] = torch.linalg.vector_norm(tensors[i], dtype=torch.float64)
    return out


def norm_vector(tensors: list[torch.Tensor]) -> torch.Tensor:
    """`norms` as one 1-d tensor: a step's buffer then holds one part for a set of parameters, not one per
    tensor (each part costs the transfer and the host side a few calls). On the CPU the float32 norms are
    checked with one read (their sum on the host); only when it is not finite (an overflow to inf, or a NaN
    beside which an inf could hide) are they recomputed one by one (see `norms`)."""
    kind = tensors[0].device.type
    real = all(t.dtype in _FLOATS for t in tensors)
    if kind in WIDE and real:
        return torch.stack(torch._foreach_norm(tensors, 2, dtype=torch.float64))
    if kind == "cpu":
        vec = torch.stack(torch._foreach_norm(tensors))
        if not vec.is_floating_point() or math.isfinite(sum(vec.tolist())):
            return vec
    return torch.stack([_wide(n) for n in norms(tensors)])


def _sum_and_squares(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum and sum of squares of a float32 vector, overflow-safe as `norms`: on the CPU once `overflowed` has
    checked the float32 pair (the caller keeps the tensor for `wide_sums`)."""
    if flat.device.type in WIDE:
        return _float64_sums(flat)
    return flat.sum(), torch.dot(flat, flat)


def _float64_sums(flat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return flat.sum(dtype=torch.float64), torch.linalg.vector_norm(flat, dtype=torch.float64).square()


def wide_sums(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`_sum_and_squares` of `x`'s values accumulated in float64: for a float32 pair that overflowed (see
    `overflowed`)."""
    flat = x.detach().reshape(-1)
    return _float64_sums(flat if flat.dtype is torch.float32 else flat.float())


def overflowed(pairs: list[tuple[torch.Tensor, torch.Tensor]]) -> list[int]:
    """Which CPU (sum, sum of squares) pairs of `full` hold an inf: to be recomputed with `wide_sums` (a NaN
    is not: only NaN values make one). All pairs of a step are read in one stack, not two reads per site."""
    if not pairs:
        return []
    vals = torch.stack([t for pair in pairs for t in pair]).tolist()
    return [i for i in range(len(pairs)) if math.isinf(vals[2 * i] + vals[2 * i + 1])]


def _norm(flat: torch.Tensor) -> torch.Tensor:
    return norms([flat])[0]


def cheap(x: torch.Tensor) -> torch.Tensor:
    """One reduction: non-finite iff some element is NaN/Inf. Half precision is summed in fp32, so its
    own range cannot overflow."""
    x = x.detach()
    if x.device.type in WIDE:  # float64 there: a sum past float32's range (values ~1e33) is no NaN/Inf
        return x.sum(dtype=torch.float64)
    return x.sum() if x.dtype is torch.float32 else x.sum(dtype=torch.float32)


def sample(flat: torch.Tensor) -> torch.Tensor:
    """SAMPLE elements of a 1-d tensor (all of a small one), spread evenly over it in contiguous blocks (a
    2-d view, no copy), so a per-element test reads a fraction of the memory instead of all of it."""
    n = flat.numel()
    if n <= 2 * SAMPLE:
        return flat
    rows = n // SAMPLE_BLOCK
    take = SAMPLE // SAMPLE_BLOCK
    return flat[: rows * SAMPLE_BLOCK].view(rows, SAMPLE_BLOCK)[:: rows // take][:take]


def full(x: torch.Tensor, flags: int) -> tuple[list[torch.Tensor], Layout]:
    """Raw sums behind ActStats as 0-d device tensors; `act_stats` finishes them on the host. The std is
    one pass (sum of squares: relative error about 1e-7*(mean/std)^2, under 1% while |mean| < 300*std)
    except for input data (EXACT: two-pass, centred), where a large offset is common. Non-finite values
    show in min/max; input data also gets their exact count. On the CPU, the first two values of a site
    that is not EXACT are float32 sums still to be checked for overflow (StepBuffer.add_full)."""
    x = x.detach()
    if x.dtype != torch.float32:
        x = x.float()
    n = x.numel()
    flat = x.reshape(-1)
    if flags & EXACT:
        s = flat.sum(dtype=torch.float64) if flat.device.type in WIDE else flat.sum()
        if flat.is_cpu and math.isinf(s.item()):
            s = flat.sum(dtype=torch.float64)
        centred = torch.sub(flat, s, alpha=1.0 / n)
        out = [
            s,
            _norm(centred),
            *torch.aminmax(flat),
            torch.add(_one(x.device), flat, alpha=0, out=centred).nansum(),
        ]  # 1 + 0*x: NaN unless finite
        return out, Layout(n, n, 0, flags)
    s, sq = _sum_and_squares(flat)
    if not flags & (DEAD | SAT):  # a layer's output: only the mean and std are judged (min/max: NaN)
        return [s, sq], Layout(n, n, 0, flags)
    part = sample(flat)
    t = _scratch(part)
    out = [s, sq, *torch.aminmax(part)]  # the range tells ReLU/sigmoid/tanh outputs apart
    units = 0
    if flags & DEAD:
        out.append(torch.eq(part, 0, out=t).sum())  # counts as 0/1 floats: several times faster than bools
        if x.dim() >= 2:
            unit = unit_axis(x.dim(), flags)
            peak = x.amax(dim=tuple(d for d in range(x.dim()) if d != unit))
            units = peak.numel()
            out[3] = peak.max()  # the exact max comes free with the units' peaks
            out.append(torch.le(peak, 0, out=peak).sum())
    if flags & SAT01:
        out.append(torch.gt(torch.sub(part, 0.5, out=t).abs_(), 0.48, out=t).sum())
    if flags & SAT11:
        out.append(torch.gt(torch.abs(part, out=t), 0.96, out=t).sum())
    return out, Layout(n, part.numel(), units, flags)


def act_stats(v: list[float], lay: Layout) -> ActStats:
    """Host side of `full`: mean, population std, min, max, zero_frac, dead_frac, sat01, sat11, nonfinite
    (exact count for input data; elsewhere 1.0 means "at least one")."""
    n, flags = lay.n, lay.flags
    s, sq = v[:2]
    mn, mx = v[2:4] if flags & (DEAD | SAT | EXACT) else (math.nan, math.nan)
    mean = s / n
    if flags & EXACT:
        std = sq / math.sqrt(n)
        nonfinite = n - v[4]
    else:
        var = sq / n - mean * mean
        if not math.isfinite(mean):
            std = math.nan
        else:  # NaN/inf stay NaN/inf; rounding cannot make it negative
            std = math.sqrt(var) if var > 0 else (0.0 if var == var else var)
        ranged = bool(flags & (DEAD | SAT))
        nonfinite = 0.0 if math.isfinite(s) and (not ranged or math.isfinite(mn) and math.isfinite(mx)) else 1.0
    rest = iter(v[4:]) if not flags & EXACT else iter(())
    zero = next(rest) / lay.sampled if flags & DEAD else 0.0
    dead = next(rest) / lay.units if lay.units else 0.0
    sat01 = next(rest) / lay.sampled if flags & SAT01 else 0.0
    sat11 = next(rest) / lay.sampled if flags & SAT11 else 0.0
    per_unit = n / lay.units if lay.units else 0.0
    return ActStats(1.0, mean, std, mn, mx, zero, dead, sat01, sat11, nonfinite, per_unit, float(n))


_SCRATCH: list[torch.Tensor] = []
_VIEWS: dict[torch.Size, torch.Tensor] = {}  # shape -> a view of the kept buffer


def _scratch(part: torch.Tensor) -> torch.Tensor:
    """A float32 tensor shaped like `part` for the 0/1 counts. On CPU one is kept and reused (fresh memory
    is page-faulted in each time), with its view per shape; elsewhere the caching allocator already reuses
    memory."""
    if not part.is_cpu or part.numel() > SCRATCH_KEEP:
        return torch.empty(part.shape, dtype=torch.float32, device=part.device)
    view = _VIEWS.get(part.shape)
    if view is None:
        if not _SCRATCH:
            _SCRATCH.append(torch.empty(SCRATCH_KEEP, dtype=torch.float32))
        if len(_VIEWS) > 64:
            _VIEWS.clear()
        view = _VIEWS[part.shape] = _SCRATCH[0][: part.numel()].view(part.shape)
    return view


_ONES: dict[torch.device, torch.Tensor] = {}


def _one(device: torch.device) -> torch.Tensor:
    one = _ONES.get(device)
    if one is None:
        one = _ONES[device] = torch.ones((), device=device)
    return one


_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}
CHECKSUM_BITS = 0xFFFFFF  # a checksum is kept to 24 bits, so float32 carries it home exactly


def is_sharded(t: torch.Tensor) -> TypeGuard[DTensor]:
    """A DTensor (FSDP2's sharded parameters and gradients): only its local shard is read, with no collective."""
    return type(t).__name__ == "DTensor"


def local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if is_sharded(t) else t


def local_parts(tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[float] | None]:
    """Sharded tensors -> their local shards, and per tensor the factor that takes a shard's norm to an estimate
    of the whole tensor's (the shards of one parameter look alike, as a gradient sample's parts do); None
    when nothing is sharded."""
    if not any(map(is_sharded, tensors)):
        return tensors, None
    parts = [local(t) for t in tensors]
    return parts, [math.sqrt(t.numel() / p.numel()) if p.numel() else 0.0 for t, p in zip(tensors, parts)]


def holds(p: torch.Tensor) -> bool:
    """Whether this process holds any element of the parameter (a shard can be empty on some ranks)."""
    return local(p).numel() > 0


def bit_views(params: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """Integer views of each tensor's bits, for `checksums` (None for a dtype without one)."""
    out = []
    for p in params:
        bits = _BITS.get(p.element_size()) if p.is_floating_point() else None
        out.append(local(p).detach().view(bits) if bits is not None else None)
    return out


def checksums(views: list[torch.Tensor | None]) -> torch.Tensor | list[torch.Tensor]:
    """An exact change detector per tensor: the wrapping integer sum of its bit patterns (24 bits). Any
    change to any element changes it unless the changes cancel exactly (about 1 in 16 million), where a
    float norm absorbs updates far below its resolution (lr=1e-6: a 1e-6 relative step per weight). One
    read of the tensor, as fast as a float sum. A tensor without an integer view gets NaN (never equal to
    anything: it always counts as changed). One vector, or 0-d tensors when devices or widths differ."""
    sums = [
        v.sum(dtype=torch.int64 if v.dtype is torch.int64 else torch.int32) if v is not None else None for v in views
    ]
    present = [s for s in sums if s is not None]
    try:
        if len(present) == len(sums) and len({s.dtype for s in present}) == 1:
            return _fold(torch.stack(present))
    except RuntimeError:  # on more than one device
        pass
    return [_fold(s) if s is not None else torch.full((), math.nan) for s in sums]


def _fold(x: torch.Tensor) -> torch.Tensor:
    """All 64 bits of a sum folded into 24 (float64 weights made from float32 ones have zero low bits)."""
    x = x.long()
    return ((x ^ (x >> 24) ^ (x >> 48)) & CHECKSUM_BITS).float()


def _wide(t: torch.Tensor) -> torch.Tensor:
    """float32, or float64 for a float64 part (an overflow-safe statistic beyond float32's range stays finite)."""
    return t if t.dtype is torch.float32 or t.dtype is torch.float64 else t.float()


FEW_PARTS = 8


def host_values(tensors: list[torch.Tensor]) -> list[float]:
    """All values home in one copy (per device): the 0-d parts stacked, the occasional 1-d part (a
    vector of checksums) appended; any dtype comes back as a float, in the parts' order. A few parts on the
    CPU (an unsampled step: its losses and one vector of gradient norms) are read one by one: there is no
    device to wait for, and stacking them costs more than reading them."""
    if len(tensors) <= FEW_PARTS and all(t.is_cpu for t in tensors):
        out: list[float] = []
        for t in tensors:
            t = _wide(t)
            if t.dim():
                out.extend((t if t.dim() == 1 else t.reshape(-1)).tolist())
            else:
                out.append(t.item())
        return out
    sizes = [t.numel() if t.dim() else -1 for t in tensors]  # -1: a 0-d part
    vectors = [_wide(t if t.dim() == 1 else t.reshape(-1)) for t, n in zip(tensors, sizes) if n >= 0]
    if not vectors:
        return _scalars_home(tensors)
    scalars = [t for t, n in zip(tensors, sizes) if n < 0]
    try:
        flat = torch.cat([_wide(torch.stack(scalars)), *vectors] if scalars else vectors).tolist()
    except RuntimeError:  # on more than one device
        flat = _scalars_home(scalars) + [v for vec in vectors for v in vec.tolist()]
    if not scalars:
        return flat
    out, head, tail = [], 0, len(scalars)  # back in the parts' order: the scalars came first, then the vectors
    for n in sizes:
        if n < 0:
            out.append(flat[head])
            head += 1
        else:
            out.extend(flat[tail : tail + n])
            tail += n
    return out


def _scalars_home(scalars: list[torch.Tensor]) -> list[float]:
    if not scalars:
        return []
    try:
        return _wide(torch.stack(scalars)).tolist()
    except RuntimeError:  # on more than one device
        pass
    by_device: dict[torch.device, list[int]] = defaultdict(list)
    for i, t in enumerate(scalars):
        by_device[t.device].append(i)
    out: list[float] = [0.0] * len(scalars)
    for idx in by_device.values():
        for i, v in zip(idx, _wide(torch.stack([scalars[i] for i in idx])).tolist()):
            out[i] = v
    return out

"""Attention on sampled steps: the largest attention logit and how spread the attention rows are.

Fused kernels (F.scaled_dot_product_attention, nn.MultiheadAttention with need_weights=False, which calls it)
never materialise the attention weights, so they are recomputed here for a few query rows: ROWS rows evenly
spread over the sequence (the last one included: under a causal mask it sees every key), for the first BATCH
batch elements and every head, softmax(q.k^T * scale + mask) in float32 on the tensor's device. That is
ROWS/L of the layer's own score computation for BATCH/N of its batch, under no_grad. nn.MultiheadAttention
with need_weights=True (its default when called directly) does not go through the fused function: its q and
k are recomputed from the module's in-projection for the same rows.

Values (0-d tensors): the largest logit (q.k * scale, plus an additive mask's bias) over the keys a row may
attend to; the mean and the median over rows
(and heads) of the row's entropy divided by log(keys it may attend to) (1: uniform, 0: one-hot). Rows that may
attend to a single key are left out (their entropy is 0 by construction: a causal mask's first row)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import torch

ROWS = 16  # query rows recomputed per call
BATCH = 2  # batch elements recomputed per call
MASKED = -1e4  # an additive mask value at or below this hides the key (-inf, finfo.min, -1e9 all do)

MHA_ARGS = (
    "query",
    "key",
    "value",
    "embed_dim_to_check",
    "num_heads",
    "in_proj_weight",
    "in_proj_bias",
    "bias_k",
    "bias_v",
    "add_zero_attn",
    "dropout_p",
    "out_proj_weight",
    "out_proj_bias",
    "training",
    "key_padding_mask",
    "need_weights",
    "attn_mask",
    "use_separate_proj_weight",
    "q_proj_weight",
    "k_proj_weight",
    "v_proj_weight",
    "static_k",
    "static_v",
    "average_attn_weights",
    "is_causal",
)
SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


class AttnLayout(NamedTuple):
    """What one attention entry is (host side): its values are [max_logit, entropy, entropy_median]."""

    source: str  # "sdpa" | "mha"
    heads: int
    rows: int
    keys: int


def _bind(names: tuple[str, ...], args: tuple, kwargs: dict) -> dict[str, Any]:
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


_CACHE: dict[tuple, tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]] = {}  # see _causal
LOWEST = torch.finfo(torch.float32).min  # a hidden score: exp() of it is exactly 0 (no 0 * inf, unlike -inf)


def _rows(length: int, device: torch.device) -> torch.Tensor:
    """ROWS query positions evenly spread over [0, length), the last one included."""
    r = min(ROWS, length)
    return torch.linspace(length - 1, 0, r, device=device).round().long().flip(0)


def _causal(length: int, keys: int, device: torch.device, causal: bool) -> tuple:
    """(rows, hidden, -log of the keys each row may attend to) for a plain or causal call: made once per shape."""
    key = (length, keys, str(device), causal)
    found = _CACHE.get(key)
    if found is None:
        if len(_CACHE) > 64:
            _CACHE.clear()
        idx = _rows(length, device)
        hidden = idx[:, None] < torch.arange(keys, device=device)[None, :] if causal else None
        _CACHE[key] = found = (idx, hidden, _log_keys(hidden, keys, device))
    return found


def _log_keys(hidden: torch.Tensor | None, keys: int, device: torch.device) -> torch.Tensor:
    """-log(keys a row may attend to), NaN where that is at most 1 (a row whose entropy is 0 by construction).
    Negative: sum(p log p) / -log(n) is the entropy's ratio without a negation of its own (the same bits)."""
    if hidden is None:
        return torch.tensor(-math.log(keys) if keys > 1 else math.nan, device=device)
    n = (~hidden).sum(-1).float()
    return torch.where(n > 1, n.clamp_min(2).log().neg_(), torch.full((), math.nan, device=device))


def _split(mask: torch.Tensor, true_hides: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A mask as (hidden, finite additive bias or None). Bool: sdpa's True attends, nn.MultiheadAttention's True
    hides. Float: added to the scores, a value at or below MASKED (or NaN) hides the key."""
    if mask.dtype == torch.bool:
        return (mask if true_hides else ~mask), None
    hidden = ~(mask > MASKED)
    return hidden, mask.float().masked_fill(hidden, 0.0)


def _or(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else a | b


def _plus(a: torch.Tensor | None, b: torch.Tensor | None) -> torch.Tensor | None:
    return b if a is None else a if b is None else a + b


def stats(
    q: torch.Tensor,
    k: torch.Tensor,
    hidden: torch.Tensor | None,
    bias: torch.Tensor | None,
    log_keys: torch.Tensor,
    scale: float,
) -> list[torch.Tensor]:
    """q (..., r, d), k (..., S, d); hidden: bool broadcastable to (..., r, S), True where a row may not attend
    (None: every key may), bias: finite additive scores (None: none); log_keys: -log(keys allowed) broadcastable
    to (..., r), NaN for rows left out (see _log_keys)."""
    q = q if q.dtype == torch.float32 else q.float()
    k = k if k.dtype == torch.float32 else k.float()
    z = torch.matmul(q * scale, k.transpose(-2, -1))
    if bias is not None:
        z = z + bias
    if hidden is not None:
        z = torch.where(hidden, LOWEST, z)  # (where: a third faster than masked_fill on the CPU, same values)
    logp = torch.log_softmax(z, dim=-1)
    if hidden is not None:
        # a hidden key's term is -0.0 either way (exp(-3e38) * -3e38), but exp() of such a value (or of any
        # below about -88) takes a slow path on the CPU: 20x the time of the whole row's exp
        logp = torch.where(hidden, -0.0, logp)
    ent = (logp.exp() * logp).sum(-1).div_(log_keys)
    return [z.amax(), ent.nanmean(), ent.flatten().nanmedian()]


def sdpa_values(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], AttnLayout] | None:
    """F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)."""
    a = _bind(SDPA_ARGS, args, kwargs)
    q, k = a.get("query"), a.get("key")
    if not isinstance(q, torch.Tensor) or not isinstance(k, torch.Tensor) or q.dim() < 2 or k.dim() != q.dim():
        return None
    length, keys, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if length == 0 or keys == 0 or d == 0 or not q.is_floating_point():
        return None
    with torch.no_grad():
        idx, hidden, log_keys = _causal(length, keys, q.device, bool(a.get("is_causal")))
        qb, kb = q.detach(), k.detach()
        if q.dim() >= 3:
            qb, kb = qb[:BATCH], kb[:BATCH]
        qb = qb.index_select(-2, idx)
        if q.dim() >= 4 and k.shape[-3] != q.shape[-3] and k.shape[-3] and q.shape[-3] % k.shape[-3] == 0:
            kb = kb.repeat_interleave(q.shape[-3] // k.shape[-3], dim=-3)  # grouped-query attention
        bias = None
        m = a.get("attn_mask")
        if isinstance(m, torch.Tensor):
            m = m.detach()
            if m.dim() == q.dim() and q.dim() >= 3 and m.shape[0] == q.shape[0]:
                m = m[:BATCH]
            if m.dim() >= 2 and m.shape[-2] == length:
                m = m.index_select(-2, idx)
            mhidden, bias = _split(m, true_hides=False)
            hidden = _or(hidden, mhidden)
            log_keys = _log_keys(hidden, keys, q.device)
        scale = a.get("scale")
        vals = stats(qb, kb, hidden, bias, log_keys, float(scale) if scale is not None else 1.0 / math.sqrt(d))
    heads = q.shape[-3] if q.dim() >= 4 else 1
    return vals, AttnLayout("sdpa", heads, int(idx.numel()), keys)


def mha_values(args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], AttnLayout] | None:
    """F.multi_head_attention_forward with need_weights=True (need_weights=False calls sdpa: read there)."""
    a = _bind(MHA_ARGS, args, kwargs)
    if not a.get("need_weights", True) or a.get("static_k") is not None or a.get("bias_k") is not None:
        return None
    if a.get("add_zero_attn"):
        return None
    query, key, heads = a.get("query"), a.get("key"), a.get("num_heads")
    if not isinstance(query, torch.Tensor) or not isinstance(key, torch.Tensor) or not isinstance(heads, int):
        return None
    if query.dim() == 2:  # unbatched (L, E)
        query, key = query.unsqueeze(1), key.unsqueeze(1)
    length, batch, embed = query.shape
    keys = key.shape[0]
    if length == 0 or keys == 0 or heads <= 0 or embed % heads:
        return None
    if a.get("use_separate_proj_weight"):
        wq, wk = a.get("q_proj_weight"), a.get("k_proj_weight")
    else:
        w = a.get("in_proj_weight")
        wq, wk = (w[:embed], w[embed : 2 * embed]) if isinstance(w, torch.Tensor) else (None, None)
    if not isinstance(wq, torch.Tensor) or not isinstance(wk, torch.Tensor):
        return None
    bias = a.get("in_proj_bias")
    bq, bk = (bias[:embed], bias[embed : 2 * embed]) if isinstance(bias, torch.Tensor) else (None, None)
    hd, b = embed // heads, min(batch, BATCH)
    with torch.no_grad():
        idx = _causal(length, keys, query.device, False)[0]
        qx = query.detach()[:, :b].index_select(0, idx).float()
        kx = key.detach()[:, :b].float()
        q = torch.nn.functional.linear(qx, wq.detach().float(), None if bq is None else bq.detach().float())
        k = torch.nn.functional.linear(kx, wk.detach().float(), None if bk is None else bk.detach().float())
        q = q.view(len(idx), b, heads, hd).permute(1, 2, 0, 3)  # (b, H, r, hd)
        k = k.view(keys, b, heads, hd).permute(1, 2, 0, 3)  # (b, H, S, hd)
        m = a.get("attn_mask")
        hidden, bias = None, None
        if isinstance(m, torch.Tensor):
            m = m.detach()
            if m.dim() == 3:  # (N * H, L, S)
                m = m.view(batch, heads, length, keys)[:b] if m.shape[0] == batch * heads else m.unsqueeze(0)
            if m.shape[-2] == length:
                m = m.index_select(-2, idx)
            hidden, bias = _split(m, true_hides=True)
        elif a.get("is_causal"):
            hidden = idx[:, None] < torch.arange(keys, device=query.device)[None, :]
        kpm = a.get("key_padding_mask")
        if isinstance(kpm, torch.Tensor):
            khidden, kbias = _split(kpm.detach().reshape(-1, keys)[:b].view(-1, 1, 1, keys), true_hides=True)
            hidden, bias = _or(hidden, khidden), _plus(bias, kbias)
        vals = stats(q, k, hidden, bias, _log_keys(hidden, keys, query.device), 1.0 / math.sqrt(hd))
    return vals, AttnLayout("mha", heads, int(idx.numel()), keys)

"""Causal attention with the mask folded into a bias tensor: SDPA, and the explicit float32 path.

Causality is by index, bottom-right aligned: query row i (of Tq) sees keys j <= i + (Tk - Tq); with
a sliding ``window`` also only keys j > i + (Tk - Tq) - window (the last ``window``, itself included).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def causal_mask(tq: int, tk: int, device, window: int | None = None) -> torch.Tensor:
    """(Tq, Tk) bool, True where key j is visible to query i (bottom-right aligned, within
    ``window`` keys when one is given)."""
    i = torch.arange(tq, device=device)[:, None] + (tk - tq)
    j = torch.arange(tk, device=device)[None, :]
    if window is not None and windowed(tk, window):
        return (j <= i) & (j > i - window)
    return j <= i


def windowed(tk: int, window: int | None) -> bool:
    """Whether a sliding ``window`` hides any of Tk keys from some query (the oldest query sits at
    key index >= 0, so with Tk <= window every query sees all its causal keys)."""
    return window is not None and tk > window


def causal_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    masked: bool = False,
    window: int | None = None,
) -> torch.Tensor:
    """Causal SDPA; ``bias`` (H, Tq, Tk) or (1, H, Tq, Tk), added to the scores unscaled, the mask
    folded in as -inf (``masked=True``: the causal part already done). A bias in another dtype than
    q takes the explicit float32 path, as SDPA wants the mask in q's dtype. ``window``: keys older
    than the last ``window`` masked too."""
    tq, tk = q.shape[-2], k.shape[-2]
    if windowed(tk, window):
        mask = causal_mask(tq, tk, q.device, window)  # (Tq, Tk)
        if bias is None:
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        bias = bias.masked_fill(~mask, float("-inf"))
        masked = True
    if bias is None:
        if tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        if tq == 1:
            return F.scaled_dot_product_attention(q, k, v)
        mask = causal_mask(tq, tk, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    if not masked:
        bias = mask_bias(bias)
    if bias.dim() == 3:
        bias = bias[None]
    if bias.dtype == q.dtype:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    return explicit_attention(q, k, v, bias)


def mask_bias(bias: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """``bias`` (..., Tq, Tk) with -inf where the key is in the future of the query (or older
    than its ``window``)."""
    tq, tk = bias.shape[-2], bias.shape[-1]
    if tq == 1 and not windowed(tk, window):  # a single query (decoding) sees every key
        return bias
    return bias.masked_fill(~causal_mask(tq, tk, bias.device, window), float("-inf"))


def explicit_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """Softmax(q k^T / sqrt(d) + bias) v with scores, bias and softmax in float32.

    ``bias`` must already hold -inf where attention is not allowed.
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    if q.dtype == torch.float32 and bias.dtype == torch.float32:
        # Scaling q (Tq x hd products) instead of the scores (Tq x Tk) is the same product with
        # one (B, H, Tq, Tk) pass fewer, forward and backward; the bias is added in place, as
        # matmul's backward needs its inputs, not its output.
        scores = torch.matmul(q * scale, k.transpose(-2, -1)).add_(bias)
    else:
        # Half-precision q, k: the product itself is taken in float32 (rounding q.k to bfloat16
        # first would lose ~3 significant digits before the float32 bias is added).
        scores = torch.matmul(q.float() * scale, k.float().transpose(-2, -1)).add_(bias.float())
    probs = torch.softmax(scores, dim=-1).to(v.dtype)
    return torch.matmul(probs, v)


def causal_explicit_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """``explicit_attention`` for a bias already masked (``mask_bias``), by up to 4 blocks of at
    least 64 query rows, each against only the keys it may see: most of the masked upper triangle
    (probability exactly 0) is skipped, the result is the same computation."""
    tq, tk = q.shape[-2], k.shape[-2]
    n_blocks = min(4, tq // 64)
    if n_blocks < 2:
        return explicit_attention(q, k, v, bias)
    rows = -(-tq // n_blocks)
    outs, end = [], 0
    for qb, bb in zip(q.split(rows, dim=-2), bias.split(rows, dim=-2)):
        end += qb.shape[-2]
        keys = end + tk - tq
        outs.append(explicit_attention(qb, k.narrow(-2, 0, keys), v.narrow(-2, 0, keys), bb.narrow(-1, 0, keys)))
    return torch.cat(outs, dim=-2)


def biased_attention(q, k, v, bias: torch.Tensor, window: int | None = None) -> torch.Tensor:
    """Causal attention with a bias (H, Tq, Tk) that already holds -inf on future keys (and on the
    keys older than ``window``, added here). A bias that needs a gradient sends CPU SDPA to its
    math path: on a CPU in float32 the explicit path by blocks does the same arithmetic with fewer passes."""
    if windowed(k.shape[-2], window):
        bias = bias.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device, window), float("-inf"))
    if bias.requires_grad and q.dtype == torch.float32 and q.device.type == "cpu":
        return causal_explicit_attention(q, k, v, bias)
    return causal_attention(q, k, v, bias, masked=True)

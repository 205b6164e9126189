"""ALiBi's linear bias -m_h (p_i - p_j) without an L x L tensor: one number per head and key.

softmax_j(s_ij - m p_i + m p_j) = softmax_j(s_ij + m (p_j - p_mid)): the -m p_i term is the same
for every key of row i and cancels. Exact in exact arithmetic; in floating point each score is
rounded at the magnitude of m * L / 2, hence float32 and float64 only, and m * L at most
``LINEAR_SPAN`` (tests/attention/test_blocked.py checks both bounds; docs/attention-plans.md).

On a CPU the per-key bias m (p_j - p_mid) is ``posbench.core.key_bias``'s form, so a training
forward takes plain causal attention's rule (``posbench.core.causal``): where SDPA's backward would
score at least 75% of the L x L square and L >= 512, the same flash forward (the same output bits)
with the blocked GEMM backward; elsewhere the flash op's own backward.
"""

from __future__ import annotations

import math

import torch

from posbench.core import causal, cpu_flash
from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import key_bias_attention

# The largest max slope x span of positions this path takes (beyond it, the distance row).
LINEAR_SPAN = 2048.0


def linear_bias_sdpa(q, k, v, slopes: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Causal attention with the bias -slopes_h (p_i - p_j), Tq == Tk: on a CPU the flash op
    with a (1, H, 1, Tk) mask beside ``is_causal`` (``key_bias_flash``; a training forward where
    ``causal.takes_blocked`` with the blocked backward, ``key_bias_attention``), elsewhere
    one extra head dimension (``head_column_sdpa``). The causal triangle is skipped, no
    probabilities stored."""
    # Relative to the middle key: |m (p_j - p_mid)| <= m L / 2, half the rounding of p_last.
    rel = (k_pos - k_pos[k_pos.shape[0] // 2]).to(q.dtype)  # (Tk,): exact for integer positions
    key_bias = slopes.to(q.dtype)[:, None] * rel[None, :]  # (H, Tk)
    if flash_here(q.device):
        if causal.takes_blocked(q, k, v):
            return key_bias_attention(q, k, v, key_bias.expand(q.shape[0], -1, -1))  # (B, H, Tk), stride 0 over B
        return key_bias_flash(q, k, v, key_bias)
    return head_column_sdpa(q, k, v, key_bias)


def key_bias_flash(q, k, v, key_bias: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, H, L, hd), key_bias (H, L): causal softmax(q k^T / sqrt(hd) + key_bias[h, j]) v
    by the CPU flash op with a broadcast mask."""
    mask = key_bias.contiguous()[None, :, None, :]  # (1, H, 1, L): stride 0 over batch and rows
    return cpu_flash.flash_attention(q, k, v, True, mask, 1.0 / math.sqrt(q.shape[-1]))[0]


def head_column_sdpa(q, k, v, key_bias: torch.Tensor) -> torch.Tensor:
    """The same attention as ``key_bias_flash`` through public SDPA: q' = [q, 1],
    k' = [k, key_bias / scale], so scale * q'.k' = scale * q.k + key_bias (head dim hd + 1)."""
    b, h, tq, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    kx = key_bias * (1.0 / scale)  # (H, Tk)
    qa = torch.cat([q, q.new_ones(b, h, tq, 1)], -1)  # (B, H, Tq, hd + 1)
    ka = torch.cat([k, kx.expand(b, h, -1)[..., None]], -1)
    # v gets a zero column too: PyTorch's CPU flash kernel wants one head dimension for q, k, v
    # (with v's 32 against q's 33 SDPA falls back to its math path, which saves B x H x L x L).
    va = torch.cat([v, v.new_zeros(b, h, v.shape[-2], 1)], -1)
    return torch.nn.functional.scaled_dot_product_attention(qa, ka, va, is_causal=True, scale=scale)[..., :-1]

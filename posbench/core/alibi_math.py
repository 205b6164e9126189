"""ALiBi mathematics shared by the `alibi` and `alibi_triton` methods and the precision study
(Press, Smith, Lewis, ICLR 2022): the score of query i and key j gets -m_h * (i - j), one fixed
slope per head, not scaled by 1/sqrt(d).
"""

from __future__ import annotations

import math

import torch


def alibi_slopes(n_heads: int) -> list[float]:
    """Head slopes as the paper's reference code builds them: 2^(-8/n), 2^(-16/n), ..., 2^(-8) for a
    power of two n; else the closest smaller power of two p's, then every other of 2p's for the rest."""
    if not isinstance(n_heads, int) or n_heads < 1:
        raise ValueError(f"alibi_slopes: n_heads must be a positive integer, got {n_heads!r}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-8.0 / n)
        return [start ** (i + 1) for i in range(n)]

    p = 2 ** int(math.floor(math.log2(n_heads)))
    if p == n_heads:
        return power_of_two(n_heads)
    return power_of_two(p) + alibi_slopes(2 * p)[0::2][: n_heads - p]


def slopes_tensor(n_heads: int, device=None) -> torch.Tensor:
    """(H,) float32 slopes."""
    return torch.tensor(alibi_slopes(n_heads), dtype=torch.float32, device=device)


def alibi_bias(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """(H, Tq, Tk) float32 bias -m_h * (q_pos_i - k_pos_j), unmasked; integer or float positions,
    the product formed in float32 whatever the compute dtype (as the SambaNova study recommends)."""
    dist = q_pos.to(torch.float32)[:, None] - k_pos.to(torch.float32)[None, :]  # (Tq, Tk)
    return -slopes.to(torch.float32)[:, None, None] * dist[None]

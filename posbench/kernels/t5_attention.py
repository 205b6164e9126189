"""Causal attention with the T5 relative-position bias computed inside one fused Triton kernel.

Same mathematics as the ``t5_bias`` method (Raffel et al. 2020, section 2.1):

    score_ij = (q_i . k_j) / sqrt(d) + table[bucket(i_abs - j), h],   i_abs = i + (Tk - Tq)

with causal buckets (32 by default: distances below 16 exact, log-spaced up to max distance 128,
the last bucket beyond) and one table (buckets, H) shared by all layers. Where ``t5_bias``
gathers an (H, Tq, Tk) bias and hands it to attention, here each tile computes its buckets from
its row and column indices and reads the 32 x H table directly, so nothing of size T^2 is stored;
the backward pass returns dTable, the table's gradient (per-program partial sums and one
reduction: see ``posbench.kernels.fused_attention`` for the determinism trade-off).

Positions: indices times ``pos_scale`` (1 for the harness's integer aranges), the distance floored
before bucketing as ``t5_bias`` floors float distances.
"""
from __future__ import annotations

import torch

from posbench.kernels import fused_attention as fa
from posbench.kernels.fused_attention import DTYPES, HEAD_DIMS, INTERPRETED  # noqa: F401  (re-exported)


def _check_inputs(q, k, v, table, pos_scale, num_buckets, max_distance) -> None:
    name = "t5_attention"
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"{name}: table must be a torch.Tensor, got {type(table).__name__}")
    fa.check_qkv(name, q, k, v)
    h = q.shape[1]
    if num_buckets < 2 or num_buckets % 2 or num_buckets & (num_buckets - 1):
        raise ValueError(f"{name}: num_buckets must be a power of two >= 2, got {num_buckets}")
    if max_distance <= num_buckets // 2:
        raise ValueError(f"{name}: max_distance must exceed num_buckets / 2 = {num_buckets // 2}, got {max_distance}")
    if table.shape != (num_buckets, h):
        raise ValueError(f"{name}: table must have shape ({num_buckets}, {h}) (buckets, heads), got {tuple(table.shape)}")
    if table.dtype not in DTYPES:
        raise TypeError(f"{name}: table dtype {table.dtype} not supported; use float16, bfloat16 or float32")
    devices = {q.device, k.device, v.device, table.device}
    if len(devices) != 1:
        raise ValueError(f"{name}: q, k, v and table must be on one device, got {sorted(map(str, devices))}")
    if not pos_scale > 0:
        raise ValueError(f"{name}: pos_scale must be > 0, got {pos_scale}")
    fa.check_device(name, q)


def t5_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, H, Tk, hd)
    v: torch.Tensor,  # (B, H, Tk, hd)
    table: torch.Tensor,  # (buckets, H), gets a gradient
    *,
    pos_scale: float = 1.0,
    num_buckets: int = 32,
    max_distance: int = 128,
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + table[bucket(floor(pos_scale * (i_abs - j))), h]) v, fused.

    Differentiable with respect to q, k, v and ``table``. ``blocks_fwd``/``blocks_bwd`` pin the
    tile sizes as (BLOCK_M, BLOCK_N, num_warps, num_stages) instead of autotuning.
    """
    _check_inputs(q, k, v, table, pos_scale, num_buckets, max_distance)
    spec = fa.BiasSpec(fa.T5, table, pos_scale=pos_scale, num_buckets=num_buckets, max_distance=max_distance)
    return fa.fused_attention(q, k, v, spec, blocks_fwd, blocks_bwd)

"""Causal attention with the T5 relative-position bias computed inside one fused Triton kernel.

The ``t5_bias`` method's mathematics (Raffel et al. 2020): each tile computes its buckets from its
indices and reads the (buckets, H) table, so no T^2 bias is stored; the backward pass returns the
table's gradient. Kernels in ``posbench.triton_kernels.kernels``; design in docs/kernels.md.
"""

from __future__ import annotations

import torch

from posbench.triton_kernels import checks
from posbench.triton_kernels.autograd import fused_attention
from posbench.triton_kernels.bias_spec import T5, BiasSpec
from posbench.triton_kernels.checks import DTYPES, HEAD_DIMS, INTERPRETED  # noqa: F401  (re-exported)


def _check_inputs(q, k, v, table, pos_scale, num_buckets, max_distance) -> None:
    name = "t5_attention"
    if not isinstance(table, torch.Tensor):
        raise TypeError(f"{name}: table must be a torch.Tensor, got {type(table).__name__}")
    checks.check_qkv(name, q, k, v)
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
    checks.check_device(name, q)


def t5_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, Hkv, Tk, hd), Hkv dividing H: query head h reads head h // (H / Hkv)
    v: torch.Tensor,  # (B, Hkv, Tk, hd)
    table: torch.Tensor,  # (buckets, H), gets a gradient
    *,
    pos_scale: float = 1.0,
    num_buckets: int = 32,
    max_distance: int = 128,
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + table[bucket(floor(pos_scale * (i_abs - j))), h]) v, fused,
    differentiable in q, k, v and ``table``; ``blocks_*`` pin (BLOCK_M, BLOCK_N, warps, stages)."""
    _check_inputs(q, k, v, table, pos_scale, num_buckets, max_distance)
    spec = BiasSpec(T5, table, pos_scale=pos_scale, num_buckets=num_buckets, max_distance=max_distance)
    return fused_attention(q, k, v, spec, blocks_fwd, blocks_bwd)

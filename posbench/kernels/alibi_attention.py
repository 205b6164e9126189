"""Causal attention with an ALiBi bias computed inside one fused Triton kernel.

Same mathematics as the ``alibi`` method (Press, Smith, Lewis 2022, "Train Short, Test Long"):

    score_ij = (q_i . k_j) / sqrt(d) + slope_h * pos_scale * (j - i_abs),   i_abs = i + (Tk - Tq)

with the bias not scaled by 1/sqrt(d), and causality by index with bottom-right alignment (query
row i sees keys j <= i_abs). The kernels live in ``posbench.kernels.fused_attention`` (shared with
T5-Triton and the no-bias baseline): FlashAttention tiling, the bias of a tile formed in registers
from its row and column indices, masking only on the diagonal tiles, autotuned tile sizes. This
module checks the inputs and names the ALiBi options.

On a machine without a GPU the kernels run on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's
numpy interpreter, float32 and float16 only), set before the first import of triton.
"""
from __future__ import annotations

import torch

from posbench.kernels import fused_attention as fa
from posbench.kernels.fused_attention import DTYPES, HEAD_DIMS, INTERPRETED  # noqa: F401  (re-exported)

BIAS_DTYPES = ("float32", "compute")


def _check_inputs(q, k, v, slopes, bias_dtype: str) -> None:
    """Raise one-line errors for inputs the kernels cannot take."""
    name = "alibi_attention"
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"{name}: slopes must be a torch.Tensor, got {type(slopes).__name__}")
    fa.check_qkv(name, q, k, v)
    h = q.shape[1]
    if slopes.shape != (h,):
        raise ValueError(f"{name}: slopes must have shape ({h},) (one per head), got {tuple(slopes.shape)}")
    devices = {q.device, k.device, v.device, slopes.device}
    if len(devices) != 1:
        raise ValueError(f"{name}: q, k, v and slopes must be on one device, got {sorted(map(str, devices))}")
    fa.check_device(name, q)
    if bias_dtype not in BIAS_DTYPES:
        raise ValueError(f"{name}: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")


def alibi_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, H, Tk, hd)
    v: torch.Tensor,  # (B, H, Tk, hd)
    slopes: torch.Tensor,  # (H,)
    *,
    pos_scale: float = 1.0,
    use_bias: bool = True,
    bias_dtype: str = "float32",
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + slope_h * pos_scale * (j - i_abs)) v, fused, differentiable.

    Query row i sits at absolute position i_abs = i + (Tk - Tq) (bottom-right alignment, the KV
    cache case), so positions are indices times ``pos_scale`` (interpolation passes a factor < 1).
    ``use_bias=False`` runs the same kernels as plain causal attention. ``bias_dtype="compute"``
    rounds the float32 bias to the input dtype before adding it (precision studies); scores and
    softmax stay float32 either way. ``blocks_fwd``/``blocks_bwd`` pin the tile sizes as
    (BLOCK_M, BLOCK_N, num_warps, num_stages) instead of autotuning. Slopes get no gradient.
    """
    _check_inputs(q, k, v, slopes, bias_dtype)
    slopes = slopes.detach().to(torch.float32).contiguous()
    spec = fa.BiasSpec(
        fa.ALIBI if use_bias else fa.NO_BIAS, slopes, pos_scale=pos_scale,
        bias_round=bias_dtype == "compute" and q.dtype != torch.float32,  # float32 -> float32 is a no-op
    )
    return fa.fused_attention(q, k, v, spec, blocks_fwd, blocks_bwd)

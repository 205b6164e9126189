"""Causal attention with an ALiBi bias computed inside one fused Triton kernel.

The ``alibi`` method's mathematics (Press, Smith, Lewis 2022), run by the shared kernels of
``posbench.triton_kernels.kernels`` (launched by ``autograd``); this module checks the inputs and
names the ALiBi options. Design and limits: docs/kernels.md.
"""

from __future__ import annotations

import torch

from posbench.triton_kernels import checks
from posbench.triton_kernels.autograd import fused_attention
from posbench.triton_kernels.bias_spec import ALIBI, NO_BIAS, BiasSpec
from posbench.triton_kernels.checks import DTYPES, HEAD_DIMS, INTERPRETED  # noqa: F401  (re-exported)

BIAS_DTYPES = ("float32", "compute")


def _check_inputs(q, k, v, slopes, bias_dtype: str, key_bias) -> None:
    """Raise one-line errors for inputs the kernels cannot take."""
    name = "alibi_attention"
    if slopes is not None and not isinstance(slopes, torch.Tensor):
        raise TypeError(f"{name}: slopes must be a torch.Tensor or None, got {type(slopes).__name__}")
    checks.check_qkv(name, q, k, v)
    h = q.shape[1]
    if slopes is not None and slopes.shape != (h,):
        raise ValueError(f"{name}: slopes must have shape ({h},) (one per head), got {tuple(slopes.shape)}")
    devices = {q.device, k.device, v.device} | ({slopes.device} if slopes is not None else set())
    if len(devices) != 1:
        raise ValueError(f"{name}: q, k, v and slopes must be on one device, got {sorted(map(str, devices))}")
    if key_bias is not None:
        checks.check_key_bias(name, q, k, key_bias)
    checks.check_device(name, q)
    if bias_dtype not in BIAS_DTYPES:
        raise ValueError(f"{name}: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")


def alibi_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, Hkv, Tk, hd), Hkv dividing H: query head h reads head h // (H / Hkv)
    v: torch.Tensor,  # (B, Hkv, Tk, hd)
    slopes: torch.Tensor | None,  # (H,); None: no ALiBi term
    *,
    key_bias: torch.Tensor | None = None,  # (B, H, Tk): one more term per key, gets a gradient
    pos_scale: float = 1.0,
    use_bias: bool = True,
    bias_dtype: str = "float32",
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + slope_h * pos_scale * (j - i_abs) + key_bias_j) v, fused,
    differentiable in q, k, v and ``key_bias`` (slopes get no gradient); i_abs = i + (Tk - Tq),
    bottom-right aligned as in KV decoding.

    ``use_bias=False`` or ``slopes=None``: no ALiBi term. ``key_bias`` is added in float32 (FoX's
    -F_j: methods/fox_triton.py). ``bias_dtype="compute"``: the ALiBi bias rounded to the input
    dtype before it is added. ``blocks_*`` pin (BLOCK_M, BLOCK_N, warps, stages).
    """
    _check_inputs(q, k, v, slopes, bias_dtype, key_bias)
    if slopes is None:  # the kernels never read it (BIAS off): a stand-in with the right stride
        slopes, use_bias = torch.zeros(q.shape[1], device=q.device), False
    slopes = slopes.detach().to(torch.float32).contiguous()
    spec = BiasSpec(
        ALIBI if use_bias else NO_BIAS,
        slopes,
        pos_scale=pos_scale,
        bias_round=bias_dtype == "compute" and q.dtype != torch.float32,  # float32 -> float32 is a no-op
        key_bias=key_bias,
    )
    return fused_attention(q, k, v, spec, blocks_fwd, blocks_bwd)

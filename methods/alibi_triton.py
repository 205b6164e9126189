"""ALiBi with attention fused into one Triton kernel: the bias is never materialised.

Same mathematics as the ``alibi`` method (Press, Smith, Lewis 2022): score_ij gets
-m_h * (q_pos_i - k_pos_j), unscaled by 1/sqrt(d). The kernel (``posbench.triton_kernels.alibi_attention``,
FlashAttention-style tiling after Dao et al. 2022) forms each tile's bias from row and column
indices, so memory stays O(T) instead of the O(H T^2) of a materialised bias.

Positions: the kernel takes positions as indices times one factor. Integer positions are taken to
be consecutive (the harness passes aranges; ``q_pos`` is the last Tq entries of ``k_pos``), so they
need no look at their values. Float positions (interpolation) give the factor
(k_pos[-1] - k_pos[0]) / (Tk - 1), read once per forward pass by ``prepare`` (one host sync,
shared by all layers); that is meant for evaluation, not training.

Option ``bias_dtype``: "float32" (default) adds the float32 bias to float32 scores. "compute"
rounds slope * distance to the input dtype inside the kernel before adding it, to study what a
half-precision bias costs; the kernel's arithmetic is float32 in both cases.
"""

from __future__ import annotations

import torch

from posbench.core.alibi_math import alibi_slopes
from posbench.core.method import ModelConfig
from posbench.core.registry import register
from posbench.triton_kernels import FusedKernelMethod

BIAS_DTYPES = ("float32", "compute")


@register
class AlibiTriton(FusedKernelMethod):
    name = "alibi_triton"
    no_window = "the fused kernel masks by causality alone (posbench/triton_kernels/alibi_attention.py)"

    def __init__(self, cfg: ModelConfig, bias_dtype: str = "float32"):
        super().__init__(cfg)
        if bias_dtype not in BIAS_DTYPES:
            raise ValueError(f"alibi_triton: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")
        self.bias_dtype = bias_dtype
        self.slope_values = alibi_slopes(cfg.n_heads)
        # Slopes per device, kept out of the module's buffers so model.half() cannot round them.
        self._slopes: dict[str, torch.Tensor] = {}

    def _slopes_on(self, device: torch.device) -> torch.Tensor:
        key = str(device)
        if key not in self._slopes:
            self._slopes[key] = torch.tensor(self.slope_values, dtype=torch.float32, device=device)  # (H,)
        return self._slopes[key]

    def attn_backend(self, device, dtype) -> str:
        return (
            "triton fused, bias in kernel (float32)"
            if self.bias_dtype == "float32"
            else f"triton fused, bias rounded to {str(dtype).removeprefix('torch.')}"
        )

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        scale = state if state is not None else self._pos_scale(k_pos)
        from posbench.triton_kernels.alibi_attention import alibi_attention

        return alibi_attention(  # (B, H, Tq, hd)
            q,
            k,
            v,
            self._slopes_on(q.device),
            pos_scale=scale,
            bias_dtype=self.bias_dtype,
        )

    def extra_repr(self) -> str:
        return f"name={self.name!r}, bias_dtype={self.bias_dtype!r}"

"""KERPLE, logarithmic variant (Chi, Fan, Ramadge, Rudnicky 2022, "KERPLE: Kernelized Relative
Positional Embedding for Length Extrapolation", NeurIPS; its logarithmic kernel).

No position embeddings; every layer adds to the score of query i and key j (unscaled by
1/sqrt(d), as ALiBi) the conditionally positive definite kernel

    b_h(i, j) = -r1_h * log(1 + r2_h * |i - j|),    r1_h, r2_h > 0 learned per head.

The paper keeps r1, r2 > 0 by clamping at a small eps; here the forward uses max(r, eps) with
eps = 0.01 and a straight-through gradient (a head clamped at eps can still learn its way back,
as with the authors' in-place clamp of the parameter data). Initialisation ``r1 ~ U(0, 2)``,
``r2 ~ U(0, 1)`` per head (the authors' released code). One pair per head, shared by all layers.

|i - j| is cached per positions tensor; the bias (a function of the distance) is built once per
forward and shared by every layer.
"""

import torch
from torch import nn

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.core.registry import register
from posbench.triton_kernels.distance_rows import FusedDistanceRows


@register
class KerpleLog(FusedDistanceRows, BiasMethod):  # on CUDA: the fused row kernel
    name = "kerple_log"

    def __init__(self, cfg, eps: float = 0.01):
        super().__init__(cfg)
        if not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError(f"kerple_log: eps must be a positive number, got {eps!r}")
        self.eps = float(eps)
        self.r1 = nn.Parameter(torch.rand(cfg.n_heads) * 2)  # (H,)
        self.r2 = nn.Parameter(torch.rand(cfg.n_heads))  # (H,)

    def bias_form(self, dtype) -> BiasForm:
        return BiasForm(relative=True)  # a function of |p_i - p_j|

    def _positive(self, r: torch.Tensor) -> torch.Tensor:
        """max(r, eps) in value, identity in gradient."""
        return r + (r.clamp(min=self.eps) - r).detach()

    def _distance(self, q_pos, k_pos) -> torch.Tensor:
        """|i - j| (Tq, Tk) float32, cached per positions tensors."""
        return self._cache.get(
            (q_pos, k_pos), lambda: (q_pos.to(torch.float32)[:, None] - k_pos.to(torch.float32)[None, :]).abs()
        )

    def bias(self, q_pos, k_pos, dtype=torch.float32) -> torch.Tensor:
        """(H, Tq, Tk) -r1 log(1 + r2 |i - j|) in ``dtype``, unmasked."""
        r1 = self._positive(self.r1).float()[:, None, None]
        r2 = self._positive(self.r2).float()[:, None, None]
        return (-r1 * torch.log1p(r2 * self._distance(q_pos, k_pos))).to(dtype)

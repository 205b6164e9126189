"""KERPLE, logarithmic variant (Chi, Fan, Ramadge, Rudnicky 2022, "KERPLE: Kernelized Relative
Positional Embedding for Length Extrapolation", NeurIPS; its logarithmic kernel).

No position embeddings; every layer adds to the score of query i and key j (unscaled by
1/sqrt(d), as ALiBi) the conditionally positive definite kernel

    b_h(i, j) = -r1_h * log(1 + r2_h * |i - j|),    r1_h, r2_h > 0 learned per head.

The paper keeps r1, r2 > 0 by clamping at a small eps; here the forward uses max(r, eps) with
eps = 0.01 and a straight-through gradient (a head clamped at eps can still learn its way back,
as with the authors' in-place clamp of the parameter data). Initialisation ``r1 ~ U(0, 2)``,
``r2 ~ U(0, 1)`` per head (the authors' released code). One pair per head, shared by all layers.

Speed: |i - j| and the causal mask are functions of the positions, cached per positions tensor;
the bias (H, Tq, Tk) depends on r1, r2 and is built once per forward pass (``prepare``) and
shared by every layer.
"""
import torch
from torch import nn

from posbench.core.method import PositionCache, PositionMethod, biased_attention, causal_mask
from posbench.core.registry import register


@register
class KerpleLog(PositionMethod):
    name = "kerple_log"

    def __init__(self, cfg, eps: float = 0.01):
        super().__init__(cfg)
        if not (isinstance(eps, (int, float)) and eps > 0):
            raise ValueError(f"kerple_log: eps must be a positive number, got {eps!r}")
        self.eps = float(eps)
        self.r1 = nn.Parameter(torch.rand(cfg.n_heads) * 2)  # (H,)
        self.r2 = nn.Parameter(torch.rand(cfg.n_heads))  # (H,)
        self._cache = PositionCache()

    def _positive(self, r: torch.Tensor) -> torch.Tensor:
        """max(r, eps) in value, identity in gradient."""
        return r + (r.clamp(min=self.eps) - r).detach()

    def _layout(self, q_pos, k_pos):
        """(distance, mask): |i - j| (Tq, Tk) float32 and 0/-inf (Tq, Tk) for future keys (or None
        for a single query), cached per positions tensors."""

        def build():
            distance = (q_pos.to(torch.float32)[:, None] - k_pos.to(torch.float32)[None, :]).abs()
            tq, tk = distance.shape
            if tq == 1:
                return distance, None
            mask = torch.zeros(tq, tk, device=distance.device).masked_fill_(~causal_mask(tq, tk, distance.device), float("-inf"))
            return distance, mask

        return self._cache.get((q_pos, k_pos), build)

    def bias(self, q_pos, k_pos, dtype=torch.float32) -> torch.Tensor:
        """(H, Tq, Tk) -r1 log(1 + r2 |i - j|) with -inf on future keys, in ``dtype``."""
        distance, mask = self._layout(q_pos, k_pos)
        r1 = self._positive(self.r1).float()[:, None, None]
        r2 = self._positive(self.r2).float()[:, None, None]
        bias = -r1 * torch.log1p(r2 * distance)
        if mask is not None:
            bias = bias + mask
        return bias.to(dtype)

    def prepare(self, q_pos, k_pos, dtype) -> torch.Tensor:
        return self.bias(q_pos, k_pos, dtype)  # (H, Tq, Tk), shared by every layer of this forward

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        bias = state if state is not None else self.bias(q_pos, k_pos, q.dtype)
        return biased_attention(q, k, v, bias)

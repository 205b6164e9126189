"""Sinusoidal position embeddings (Vaswani et al. 2017, "Attention Is All You Need", section 3.5).

PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)), added to the token
embeddings at the bottom of the network. Computed from the positions on every call, so it works
at any position (and at fractional ones, for interpolation) with no table to outgrow.
"""

import torch

from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class Sinusoidal(PositionMethod):
    name = "sinusoidal"

    def __init__(self, cfg):
        super().__init__(cfg)
        d = cfg.d_model
        inv_freq = torch.exp(-torch.arange(0, d, 2, dtype=torch.float32) * (torch.log(torch.tensor(10000.0)) / d))
        self.register_position_buffer("inv_freq", inv_freq)  # (D/2,)

    def table(self, pos: torch.Tensor) -> torch.Tensor:
        """(T, D) float32 embeddings for positions (T,)."""
        angles = pos.to(torch.float32)[:, None] * self.inv_freq[None, :]  # (T, D/2)
        pe = torch.stack([angles.sin(), angles.cos()], dim=-1)  # (T, D/2, 2): interleaved sin, cos
        return pe.flatten(1)[:, : self.cfg.d_model]

    def embed(self, x, pos, state=None):
        return x + self.table(pos).to(x.dtype)[None]

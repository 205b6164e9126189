"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with
a Unified Text-to-Text Transformer", section 2.1).

A learned scalar per head and relative-position bucket, added to the attention scores (not scaled
by 1/sqrt(d)). Causal bucketing with T5's defaults: 32 buckets, max distance 128; distances below
16 get their own bucket, larger ones share logarithmically sized buckets up to 128, and everything
beyond falls in the last bucket. One table, shared by all layers (as in T5, where only the first
layer owns it). Float distances (interpolation) are floored before bucketing.
"""
import math

import torch
from torch import nn

from posbench.method import PositionCache, PositionMethod, causal_attention
from posbench.registry import register


def relative_position_bucket(distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal T5 bucket ids for distances i - j >= 0 (negative distances, the future, map to 0)."""
    n = distance.floor().long().clamp(min=0) if distance.is_floating_point() else distance.clamp(min=0)
    max_exact = num_buckets // 2
    # log-spaced buckets between max_exact and max_distance; clamp(min=1) only guards log(0),
    # those entries take the exact branch anyway.
    large = max_exact + (
        torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
    ).long()
    large = large.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@register
class T5Bias(PositionMethod):
    name = "t5_bias"

    def __init__(self, cfg, num_buckets: int = 32, max_distance: int = 128):
        super().__init__(cfg)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, cfg.n_heads)  # (buckets, H)
        nn.init.normal_(self.table.weight, std=0.02)
        self._cache = PositionCache()

    def buckets(self, q_pos, k_pos) -> torch.Tensor:
        """(Tq, Tk) bucket ids, cached per positions tensors."""

        def build():
            distance = q_pos[:, None] - k_pos[None, :]
            return relative_position_bucket(distance, self.num_buckets, self.max_distance)

        return self._cache.get((q_pos, k_pos), build)

    def attend(self, q, k, v, q_pos, k_pos, layer):
        # (Tq, Tk, H) -> (H, Tq, Tk) in the compute dtype (the table is learned: no cache here)
        bias = self.table(self.buckets(q_pos, k_pos)).permute(2, 0, 1).to(q.dtype)
        return causal_attention(q, k, v, bias)

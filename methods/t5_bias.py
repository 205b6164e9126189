"""T5 relative position bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning with
a Unified Text-to-Text Transformer", section 2.1).

A learned scalar per head and relative-position bucket, added to the attention scores (not scaled
by 1/sqrt(d)). Causal bucketing with T5's defaults: 32 buckets, max distance 128; distances below
16 get their own bucket, larger ones share logarithmically sized buckets up to 128, and everything
beyond falls in the last bucket. One table, shared by all layers (as in T5, where only the first
layer owns it). Float distances (interpolation) are floored before bucketing.

The bias is the same in every layer of one forward, so ``BiasMethod.prepare`` gathers it once and
every layer shares it (the table's gradient is computed once per backward). The gather reads the
transposed (H, buckets) table with ``index_select``, which gives the (H, Tq, Tk) layout directly
and a fast backward on a CPU; future keys read an extra row of -inf (the mask at no cost).
"""

import dataclasses
import math

import torch
from torch import nn

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.core.method import causal_mask
from posbench.core.registry import register


def relative_position_bucket(distance: torch.Tensor, num_buckets: int = 32, max_distance: int = 128) -> torch.Tensor:
    """Causal T5 bucket ids for distances i - j >= 0 (negative distances, the future, map to 0)."""
    n = distance.floor().long().clamp(min=0) if distance.is_floating_point() else distance.clamp(min=0)
    max_exact = num_buckets // 2
    # log-spaced buckets between max_exact and max_distance; clamp(min=1) only guards log(0),
    # those entries take the exact branch anyway.
    large = (
        max_exact
        + (torch.log(n.clamp(min=1).float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)).long()
    )
    large = large.clamp(max=num_buckets - 1)
    return torch.where(n < max_exact, n, large)


@register
class T5Bias(BiasMethod):
    name = "t5_bias"
    # a function of the bucket of p_i - p_j; the gather reads -inf for future keys (no masking pass)
    FORM = BiasForm(relative=True, masked=True)

    def __init__(self, cfg, num_buckets: int = 32, max_distance: int = 128):
        super().__init__(cfg)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, cfg.n_heads)  # (buckets, H)
        nn.init.normal_(self.table.weight, std=0.02)

    def bias_form(self, dtype) -> BiasForm:
        return dataclasses.replace(self.FORM, of_distance=self._of_distance)

    def _of_distance(self, distance, h):
        """The bias at ``distance`` for head ``h``, elementwise: FlexAttention's score_mod on CUDA."""
        return self.table.weight[relative_position_bucket(distance, self.num_buckets, self.max_distance), h]

    def buckets(self, q_pos, k_pos) -> torch.Tensor:
        """(Tq, Tk) bucket ids, cached per positions tensors."""
        return self._layout(q_pos, k_pos)[0]

    def _layout(self, q_pos, k_pos):
        """Cached per positions tensors: ``(ids, index, masked)``: the (Tq, Tk) bucket ids; the
        gather index, the ids flattened with the future keys sent to an extra bucket (id
        ``num_buckets``) whose bias is -inf; whether there is such a bucket (not for a single
        query, in decoding, which sees every key)."""

        def build():
            distance = q_pos[:, None] - k_pos[None, :]
            ids = relative_position_bucket(distance, self.num_buckets, self.max_distance)
            tq, tk = ids.shape
            if tq == 1:
                # A decode step: (1, C) ids, one gather of H x C per step. Its k_pos is new every
                # step, so earlier entries are never asked for again: drop them, or the prefill's
                # (C, C) int64 ids and index would stay alive through the first decode steps.
                self._cache.clear()
                return ids, ids.reshape(-1), False
            index = ids.masked_fill(~causal_mask(tq, tk, ids.device), self.num_buckets)
            return ids, index.reshape(-1), True

        return self._cache.get((q_pos, k_pos), build)

    def bias(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """(H, Tq, Tk) bias in ``dtype`` with the causal mask folded in as -inf (differentiable
        with respect to the table)."""
        _, index, masked = self._layout(q_pos, k_pos)
        weight = self.table.weight  # (buckets, H)
        if masked:  # one more row, -inf, for the future keys: masking costs no pass of its own
            weight = torch.cat([weight, weight.new_full((1, weight.shape[1]), float("-inf"))])
        # (H, buckets) -> (H, Tq * Tk): already the layout attention wants, no permute
        bias = weight.t().index_select(1, index)
        return bias.view(weight.shape[1], q_pos.shape[0], k_pos.shape[0]).to(dtype)

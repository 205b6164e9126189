"""T5 relative position bias with attention fused into one Triton kernel: the bias is never stored.

Same mathematics and parameters as ``t5_bias`` (Raffel et al. 2020, section 2.1): a learned
scalar per head and causal relative-position bucket (32 buckets, max distance 128 by default),
added to the scores unscaled, one table shared by all layers; the state_dict key is the same
(``table.weight``, (buckets, H)), so checkpoints move between the two methods. The kernel
(``posbench.triton_kernels.t5_attention``) computes each tile's buckets from its indices and reads the
table directly, so memory stays O(T) instead of the O(H T^2) of a gathered bias, and its backward
returns the table's gradient.

Positions: integer positions are taken to be consecutive (the harness passes aranges), so the
distance is the index distance. Float positions (interpolation) give the factor
(k_pos[-1] - k_pos[0]) / (Tk - 1), read once per forward pass by ``prepare`` (one host sync,
shared by all layers); the kernel floors factor * index distance, as
``t5_bias`` floors the float distance (equal for power-of-two factors such as 0.25).
"""

from __future__ import annotations

from torch import nn

from posbench.core.registry import register
from posbench.triton_kernels import FusedKernelMethod


@register
class T5Triton(FusedKernelMethod):
    name = "t5_triton"
    no_window = "the fused kernel masks by causality alone (posbench/triton_kernels/t5_attention.py)"

    def __init__(self, cfg, num_buckets: int = 32, max_distance: int = 128):
        super().__init__(cfg)
        if num_buckets < 2 or num_buckets & (num_buckets - 1):
            raise ValueError(f"t5_triton: num_buckets must be a power of two >= 2, got {num_buckets}")
        if max_distance <= num_buckets // 2:
            raise ValueError(f"t5_triton: max_distance must exceed num_buckets / 2, got {max_distance}")
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, cfg.n_heads)  # (buckets, H)
        nn.init.normal_(self.table.weight, std=0.02)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        scale = state if state is not None else self._pos_scale(k_pos)
        from posbench.triton_kernels.t5_attention import t5_attention

        return t5_attention(  # (B, H, Tq, hd)
            q,
            k,
            v,
            self.table.weight,
            pos_scale=scale,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )

    def extra_repr(self) -> str:
        return f"name={self.name!r}, num_buckets={self.num_buckets}, max_distance={self.max_distance}"

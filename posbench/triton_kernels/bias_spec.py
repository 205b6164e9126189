"""The bias of one fused-attention call: its kind (none, ALiBi, T5, a distance row, a learned
row), the tensor the kernels read, and the constexprs and strides they take for it.
"""

from __future__ import annotations

import math

import torch

# ROW: a bias of the distance alone read from a per-distance row (h, Tk); ROW_LEARNED: the same,
# and the backward returns the row's gradient. The kernels' constexpr BIAS takes these values.
NO_BIAS, ALIBI, T5, ROW, ROW_LEARNED = 0, 1, 2, 3, 4
BIAS_NAMES = {NO_BIAS: "none", ALIBI: "alibi", T5: "t5", ROW: "row", ROW_LEARNED: "row-learned"}
# A distance no tile reaches: the "far" segment of the loops is empty for ALiBi and no bias.
NEVER_FAR = 1 << 30


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs must stay float32 in the dots (TF32 would lose ~3 decimal digits and break
    # the comparison with PyTorch's float32 matmul); half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


class BiasSpec:
    """The bias of one call: ``tensor`` is ALiBi's slopes (H,), T5's table (buckets, H) or a
    distance row (1 or H, Tk) float32 contiguous;
    ``far_dist`` is T5's smallest distance from which every entry is in the last bucket;
    ``key_bias`` (B, H, Tk), or None, one more term per key added to either (FoX's -F_j)."""

    def __init__(
        self,
        kind: int,
        tensor: torch.Tensor,
        pos_scale: float = 1.0,
        bias_round: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
        key_bias: torch.Tensor | None = None,
    ):
        self.kind, self.tensor, self.pos_scale = kind, tensor, float(pos_scale)
        self.key_bias = key_bias
        self.bias_round, self.num_buckets, self.max_distance = bias_round, num_buckets, max_distance
        self.far_dist = far_distance(max_distance, self.pos_scale) if kind == T5 else NEVER_FAR

    def strides(self) -> tuple[int, int]:
        """(stride between buckets, stride between heads) of the bias tensor."""
        if self.kind == T5:
            return tuple(self.tensor.stride())
        if self.kind in (ROW, ROW_LEARNED):  # one row shared by every head: head stride 0
            return self.tensor.stride(1), self.tensor.stride(0) if self.tensor.shape[0] > 1 else 0
        return 0, self.tensor.stride(0)

    def tuning_name(self) -> str:
        """The bias as the tuned table names it: "alibi", "t5", ..., "+key" with a per-key term."""
        return BIAS_NAMES[self.kind] + ("+key" if self.key_bias is not None else "")

    def consts(self, dtype: torch.dtype, head_dim: int) -> dict:
        return dict(
            HEAD_DIM=head_dim,
            BIAS=self.kind,
            BIAS_ROUND=self.bias_round,
            SCALED=self.pos_scale != 1.0,
            NUM_BUCKETS=self.num_buckets,
            MAX_DISTANCE=self.max_distance,
            DOT_PRECISION=_dot_precision(dtype),
            KEY_BIAS=self.key_bias is not None,
        )


def far_distance(max_distance: int, pos_scale: float) -> int:
    """Smallest index distance d with floor(float32(d * pos_scale)) >= max_distance: from there on
    every larger distance is in the last bucket too (the float32 product is monotone in d)."""
    scale = torch.tensor(pos_scale, dtype=torch.float32)
    d = max(1, math.ceil(max_distance / max(pos_scale, 1e-30)) - 2)
    while torch.floor(torch.tensor(float(d), dtype=torch.float32) * scale).item() < max_distance:
        d += 1
    return min(d, NEVER_FAR)

"""p-RoPE, partial rotary (Barbero et al. 2025, "Round and Round We Go!
What makes Rotary Positional Encodings useful?", ICLR).

Rotary (RoFormer) keeps the highest frequencies only: of the d/2 channel pairs with
theta_i = base^(-2i/d), the first round(p * d/2) (highest frequencies) rotate by n * theta_i and the
rest have theta_i = 0, so they carry no position (NoPE channels free for semantic matching).
Options: ``fraction`` p (default 0.75, one of the paper's settings; 1.0 is rotary, 0.0 is NoPE)
and ``base`` (10000). Everything else (tables, caching, fused rotation) is the ``rotary`` method's.
"""

import torch

from posbench.core import registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class PRoPE(PositionMethod):
    name = "p_rope"

    def __init__(self, cfg, fraction: float = 0.75, base: float = 10000.0):
        super().__init__(cfg)
        if not (isinstance(fraction, (int, float)) and 0.0 <= fraction <= 1.0):
            raise ValueError(f"p_rope: fraction must be a number in [0, 1], got {fraction!r}")
        self.fraction = float(fraction)
        self.rope = registry.get("rotary")(cfg, base=base)
        pairs = cfg.head_dim // 2
        self.rotated = round(self.fraction * pairs)  # number of channel pairs that rotate
        with torch.no_grad():  # before any table is built from it
            self.rope.inv_freq[self.rotated :] = 0.0

    def prepare(self, q_pos, k_pos, dtype):
        return self.rope.prepare(q_pos, k_pos, dtype)

    def encode_qk(self, q, k, layer, state):
        return self.rope.encode_qk(q, k, layer, state)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return self.rope.attend(q, k, v, q_pos, k_pos, layer, state)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, fraction={self.fraction}, rotated_pairs={self.rotated}"

"""xPos (Sun et al. 2023, "A Length-Extrapolatable Transformer", ACL).

Rotary (RoFormer) with an exponential decay: channel pair i of the query at position n and of the
key at position m are rotated as in rotary and scaled by zeta_i^(n / gamma) and zeta_i^(-m / gamma),

    zeta_i = (2i / d + 0.4) / 1.4,   i = 0 .. d/2 - 1,   gamma = scale_base = 512,

so q_n . k_m carries zeta_i^((n - m) / gamma) <= 1: attention decays with distance, slowest for
the high-frequency pairs (zeta near 1). Both exponents are taken relative to the middle key
position c (n - c and -(m - c)), which leaves every product unchanged and keeps the scales near 1
(the paper's code centres positions the same way). Options: ``base`` (10000), ``scale_base``
(512), ``gamma`` (0.4). The paper's blockwise causal attention at inference is not part of it.
"""

import torch

from posbench.core import causal, registry
from posbench.core.method import PositionCache, PositionMethod
from posbench.core.registry import register


@register
class XPos(PositionMethod):
    name = "xpos"

    def __init__(self, cfg, base: float = 10000.0, scale_base: float = 512.0, gamma: float = 0.4):
        super().__init__(cfg)
        hd = cfg.head_dim
        if hd % 2:
            raise ValueError(f"xpos needs an even head_dim, got {hd}")
        for key, value in (("base", base), ("scale_base", scale_base), ("gamma", gamma)):
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"xpos: {key} must be a positive number, got {value!r}")
        self.scale_base = float(scale_base)
        i = torch.arange(0, hd, 2, dtype=torch.float64)  # 2i
        self.register_position_buffer("inv_freq", (base ** (-i / hd)).float())  # (hd/2,)
        self.register_position_buffer("log_zeta", torch.log((i / hd + gamma) / (1 + gamma)).float())  # (hd/2,)
        self._rotate = registry.get("rotary").rotate  # (x, cos, sin); queries take the tail rows
        self._cache = PositionCache()

    def tables(self, k_pos: torch.Tensor, dtype):
        """(cos_q, sin_q, cos_k, sin_k), each (Tk, hd/2): rotary cos/sin times zeta^((p - c)/gamma)
        for queries and divided by it for keys; cached per positions tensor."""

        def build():
            p = k_pos.to(torch.float32)
            ang = p[:, None] * self.inv_freq[None, :]
            centre = p[p.shape[0] // 2]
            up = torch.exp((p - centre)[:, None] / self.scale_base * self.log_zeta[None, :])
            cos, sin = ang.cos(), ang.sin()
            return tuple(t.to(dtype) for t in (cos * up, sin * up, cos / up, sin / up))

        return self._cache.get((k_pos,), build, extra=(dtype,))

    def prepare(self, q_pos, k_pos, dtype):
        # Keys are scaled relative to the middle key position, which moves as a KV cache grows,
        # so encode_qk leaves keys alone and attend scales every key of this forward.
        return self.tables(k_pos, dtype)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        cos_q, sin_q, cos_k, sin_k = state if state is not None else self.tables(k_pos, q.dtype)
        return causal.causal_sdpa(self._rotate(q, cos_q, sin_q), self._rotate(k, cos_k, sin_k), v, window=self.window(layer))

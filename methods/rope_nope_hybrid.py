"""RoPE in most layers, NoPE every k-th layer: the interleaving of recent long-context models
(Yang et al. 2025, "Rope to Nope and Back Again: A New Hybrid Attention Strategy"; Meta's
Llama 4 "iRoPE", a NoPE layer every 4th layer).

Layers 0 .. n-1: layer l uses no position information (plain causal attention, as ``nope``) when
(l + 1) % every == 0, that is the every-th, 2*every-th, ... layer; every other layer is rotary
(RoFormer, theta_i = base^(-2i/d)). Options: ``every`` k (default 4) and ``base`` (10000). The
NoPE layers see order only through the causal mask (Haviv et al. 2022); with fewer than k layers
the model is plain rotary.

A RoPE layer with a sliding window much shorter than the input (the recipes' layout,
methods/recipes.py) attends by query blocks, each against the keys its window reaches
(``posbench.attention.windows``), instead of handing SDPA an (L, L) boolean mask; exact against it.
"""

from posbench.attention.windows import by_blocks, window_attention
from posbench.core import causal, registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class RopeNopeHybrid(PositionMethod):
    name = "rope_nope_hybrid"

    def __init__(self, cfg, every: int = 4, base: float = 10000.0):
        super().__init__(cfg)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"rope_nope_hybrid: every must be a positive integer, got {every!r}")
        self.every = every
        self.rope = registry.get("rotary")(cfg, base=base)

    def is_nope(self, layer: int) -> bool:
        return (layer + 1) % self.every == 0

    def prepare(self, q_pos, k_pos, dtype):
        return self.rope.prepare(q_pos, k_pos, dtype)

    def encode_qk(self, q, k, layer, state):
        if self.is_nope(layer):  # this layer's cached keys stay unrotated
            return q, k
        return self.rope.encode_qk(q, k, layer, state)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        window = self.window(layer)
        if self.is_nope(layer):
            return causal.causal_sdpa(q, k, v, window=window)
        if state is not None and state.in_encode and by_blocks(q.shape[-2], k.shape[-2], window):
            return window_attention(q, k, v, window)  # q and k rotated by encode_qk
        return self.rope.attend(q, k, v, q_pos, k_pos, layer, state)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, every={self.every}"

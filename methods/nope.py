"""No position information at all (NoPE): the worked example of a method plugin.

A causal decoder can still infer order from the mask (Haviv et al. 2022, "Transformer Language
Models without Positional Encodings Still Learn Positional Information"). This file is the whole
plugin: subclass ``PositionMethod``, set ``name``, override ``embed`` and/or ``attend``.
"""

from posbench.attention import causal
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class NoPE(PositionMethod):
    name = "nope"
    # embed is the base class default, identity. attend is the default's plain causal attention by
    # the faster path per length on a CPU (posbench/attention/causal.py): nope is the floor every
    # method's cost is read against, so it takes the fastest exact path there is.

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return causal.causal_sdpa(q, k, v, window=self.window(layer))

    def attn_backend(self, device, dtype) -> str:
        return causal.backend(device, dtype)

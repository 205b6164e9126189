"""No position information at all (NoPE): the worked example of a method plugin.

A causal decoder can still infer order from the mask (Haviv et al. 2022, "Transformer Language
Models without Positional Encodings Still Learn Positional Information"). This file is the whole
plugin: subclass ``PositionMethod``, set ``name``, override ``embed`` and/or ``attend``.
"""

from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class NoPE(PositionMethod):
    name = "nope"
    # embed and attend are the base class defaults: identity and plain causal SDPA.

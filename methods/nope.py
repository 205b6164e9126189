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
    # embed is the base class default, identity; attend is the default too: plain causal attention
    # by the faster path per length on a CPU (posbench/core/causal.py). nope is the floor every
    # method's cost is read against, and every method that keeps the default attend (sinusoidal,
    # learned, a user's plugin) takes the same path, so a table row never differs by plumbing.

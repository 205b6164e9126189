"""``BiasForm``: what a bias method may declare about its bias besides ``bias()`` itself.

The plan that attends with the bias is chosen from it (``routes.choose_route``); no field changes
what is computed, only how: a method that declares nothing gets the plain plans.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import torch

from posbench.attention.piecewise import RatioPieces


@dataclass(frozen=True, eq=False)
class BiasForm:
    # (H,): the bias is exactly linear, -slopes_h (p_i - p_j) (ALiBi)
    slopes: torch.Tensor | None = None
    # max |slopes| as a Python number, when the method knows it (read under torch.compile, where
    # reading it from ``slopes`` would break the graph)
    slope_bound: float | None = None
    # the bias is a function of p_i - p_j alone (ALiBi, T5, KERPLE)
    relative: bool = False
    # (q_pos, k_pos) -> the bias as g_h(u(p_i - p_j) / z_i), g piecewise linear (FIRE)
    pieces: Callable[[torch.Tensor, torch.Tensor], RatioPieces] | None = None
    # bias() is cheap enough to build block by block in every layer
    per_block: bool = False
    # bias() already holds -inf on every future key (no masking pass)
    masked: bool = False
    # what else the bias depends on, when it may be kept across forwards (None: built every forward)
    cache_key: tuple[Hashable, ...] | None = None
    # the dtype bias() returns when it is not the compute dtype (a float32 bias kept exact)
    dtype: torch.dtype | None = None
    # (distance i - j, head) -> the bias, elementwise (T5: its bucket, then a table read):
    # FlexAttention computes it inside the score_mod, with no row or square built
    of_distance: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    def max_slope(self) -> float:
        """max |slopes|: ``slope_bound``, else read from ``slopes`` (not under torch.compile)."""
        if self.slope_bound is not None:
            return self.slope_bound
        if torch.compiler.is_compiling():
            return math.inf  # unknown without reading a tensor: not the linear plan
        return float(self.slopes.abs().max())

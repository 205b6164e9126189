"""Learned absolute position embeddings (GPT-2: Radford et al. 2019, "Language Models are
Unsupervised Multitask Learners"; fairseq's ``learned_pos`` / ``LearnedPositionalEmbedding``).

A trainable table E of ``max_positions`` rows (GPT-2: 1024) is added to the token embeddings at the
bottom of the network: x_p = s * tok_p + E[p]. Rows are drawn N(0, d^-0.5) as in fairseq (the
model's tokens enter at unit scale, so the table starts at the same scale as a sinusoidal one).

Positions the table does not hold (option ``beyond``):
  * ``"clamp"`` (default): position p >= max_positions reads the last row, E[max_positions - 1];
    every position beyond the table looks like the last one. The extrapolation suite's rows for
    ``learned`` beyond L_train measure untrained rows up to ``max_positions`` and this clamp after.
  * ``"error"``: a one-line ``ValueError`` naming the position and the table size.
Float positions (interpolation) read the two neighbouring rows, linearly interpolated:
E(p) = (1 - f) E[floor p] + f E[floor p + 1], f = p - floor p, so interpolated positions stay
within the rows training used.
"""

import torch
from torch import nn

from posbench.core.method import PositionCache, PositionMethod
from posbench.core.registry import register

BEYOND = ("clamp", "error")


@register
class Learned(PositionMethod):
    name = "learned"

    def __init__(self, cfg, max_positions: int = 1024, beyond: str = "clamp"):
        super().__init__(cfg)
        if not isinstance(max_positions, int) or max_positions < 1:
            raise ValueError(f"learned: max_positions must be a positive integer, got {max_positions!r}")
        if beyond not in BEYOND:
            raise ValueError(f"learned: beyond must be one of {', '.join(BEYOND)}, got {beyond!r}")
        self.max_positions, self.beyond = max_positions, beyond
        # A Parameter, not an nn.Embedding: the model re-initialises every nn.Embedding at std 0.02.
        self.weight = nn.Parameter(torch.randn(max_positions, cfg.d_model) * cfg.d_model**-0.5)  # (N, D)
        self._cache = PositionCache()

    def _rows(self, pos: torch.Tensor):
        """Cached per positions tensor: (lo, hi, frac): row indices (T,) and the weight of ``hi``
        (T, 1) float32, or frac None for integer positions (a plain gather)."""

        def build():
            last = self.max_positions - 1
            if self.beyond == "error" and pos.numel():
                # One host read per new positions tensor, not per step or layer.
                top = float(pos.max())
                if top > last:
                    raise ValueError(
                        f"learned: position {top:g} is beyond the table of {self.max_positions} "
                        f"positions; allowed: positions < {self.max_positions}, or beyond='clamp'"
                    )
            if not pos.is_floating_point():
                return pos.clamp(max=last), None, None
            p = pos.to(torch.float32).clamp(min=0, max=last)
            lo = p.floor()
            return lo.long(), (lo + 1).clamp(max=last).long(), (p - lo)[:, None]

        return self._cache.get((pos,), build)

    def table(self, pos: torch.Tensor) -> torch.Tensor:
        """(T, D) embeddings for positions (T,), differentiable with respect to the table."""
        lo, hi, frac = self._rows(pos)
        rows = self.weight.index_select(0, lo)
        if frac is None:
            return rows
        return torch.lerp(rows, self.weight.index_select(0, hi), frac.to(rows.dtype))

    def embed(self, x, pos, state=None):
        return x + self.table(pos).to(x.dtype)[None]

    def extra_repr(self) -> str:
        return f"name={self.name!r}, max_positions={self.max_positions}, beyond={self.beyond!r}"

"""Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers", ACL).

A base encoding (``base``: ``rotary`` or ``sinusoidal``) reads, during training, not the positions
0 .. T-1 but an ordered random subset of a larger range: T distinct integers drawn uniformly
without replacement from [0, ``max_len``) and sorted (the paper's L; default 2048, it must be at
least the longest training sequence). The model so sees the positions of long sequences while
training on short ones, and can only rely on their order. One draw per forward pass (per batch,
where the paper draws per sequence: the harness passes one position vector per batch), from
torch's global generator, so a seeded run is reproducible.

Only in training mode (``model.train()``): evaluation uses the positions it is given (0 .. T-1,
or interpolated ones), so it is deterministic and KV-cache decoding equals the full forward. The
paper samples at test time as well; with consecutive test positions the model meets gaps of 1,
smaller than the typical gap max_len / T of training, which is what the extrapolation rows of this
method measure.
"""
from typing import Any, NamedTuple

import torch

from posbench.core import registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register

BASES = ("rotary", "sinusoidal")


class Drawn(NamedTuple):
    """``prepare``'s state: the positions drawn for this training forward (None in evaluation)
    and the base method's own state for the positions it will see."""

    pos: torch.Tensor | None
    inner: Any


@register
class Randomized(PositionMethod):
    name = "randomized"

    def __init__(self, cfg, base: str = "rotary", max_len: int = 2048):
        super().__init__(cfg)
        if base not in BASES:
            raise ValueError(f"randomized: base must be one of {', '.join(BASES)}, got {base!r}")
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
            raise ValueError(f"randomized: max_len must be a positive integer, got {max_len!r}")
        self.base, self.max_len = base, max_len
        self.inner = registry.get(base)(cfg)

    def sample(self, length: int, device) -> torch.Tensor:
        """(length,) int64: an ordered random subset of [0, max_len)."""
        if length > self.max_len:
            raise ValueError(f"randomized: a training sequence of {length} tokens is longer than max_len "
                             f"{self.max_len}; allowed: max_len >= the training length")
        return torch.randperm(self.max_len, device=device)[:length].sort().values

    def prepare(self, q_pos, k_pos, dtype) -> Drawn:
        if not self.training or k_pos.shape != q_pos.shape:  # evaluation, or a KV cache
            return Drawn(None, self.inner.prepare(q_pos, k_pos, dtype))
        # One draw serves embed and every layer of this training forward.
        drawn = self.sample(q_pos.shape[0], q_pos.device)
        return Drawn(drawn, self.inner.prepare(drawn, drawn, dtype))

    def embed(self, x, pos, state: Drawn | None = None):
        if state is None:
            return self.inner.embed(x, pos)
        return self.inner.embed(x, pos if state.pos is None else state.pos, state.inner)

    def encode_qk(self, q, k, layer, state: Drawn):
        return self.inner.encode_qk(q, k, layer, state.inner)

    def attend(self, q, k, v, q_pos, k_pos, layer, state: Drawn | None = None):
        if state is None:  # outside a model forward: the positions given
            return self.inner.attend(q, k, v, q_pos, k_pos, layer)
        if state.pos is not None:
            q_pos = k_pos = state.pos
        return self.inner.attend(q, k, v, q_pos, k_pos, layer, state.inner)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, base={self.base!r}, max_len={self.max_len}"

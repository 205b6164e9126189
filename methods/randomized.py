"""Randomized positional encodings (Ruoss et al. 2023, "Randomized Positional Encodings Boost
Length Generalization of Transformers", ACL).

A base encoding (``base``: ``rotary`` or ``sinusoidal``) reads, during training, not the positions
0 .. T-1 but an ordered random subset of a larger range: T distinct integers drawn uniformly
without replacement from [0, ``max_len``) and sorted (the paper's L; default 2048, it must be at
least the longest training sequence). The model so sees the positions of long sequences while
training on short ones, and can only rely on their order. One draw per forward pass (per batch,
where the paper draws per sequence: the harness passes one position vector per batch), from
torch's global generator, so a seeded run is reproducible.

By default (``eval_positions: given``) only in training mode (``model.train()``): evaluation uses
the positions it is given (0 .. T-1, or interpolated ones), so it is deterministic and KV-cache
decoding equals the full forward. With consecutive test positions the model meets gaps of 1,
smaller than the typical gap max_len / T of training, which is what the extrapolation rows of this
method measure.

``eval_positions: sampled`` is the paper's protocol: evaluation draws an ordered subset of [0,
max_len) per forward too, so a test sequence meets the positions training taught (the DeepMind
reference draws in every forward, training or not). It is for scoring with full forwards
(teacher-forced exact match, perplexity windows): a decoding step through a KV cache would read
positions of another draw, so it is refused with one line.
"""

from typing import Any, NamedTuple

import torch

from posbench.core import registry
from posbench.core.method import PositionMethod
from posbench.core.registry import register

BASES = ("rotary", "sinusoidal")
EVAL_POSITIONS = ("given", "sampled")


class Drawn(NamedTuple):
    """``prepare``'s state: the positions drawn for this training forward (None in evaluation)
    and the base method's own state for the positions it will see."""

    pos: torch.Tensor | None
    inner: Any


@register
class Randomized(PositionMethod):
    name = "randomized"

    def __init__(self, cfg, base: str = "rotary", max_len: int = 2048, eval_positions: str = "given"):
        super().__init__(cfg)
        if base not in BASES:
            raise ValueError(f"randomized: base must be one of {', '.join(BASES)}, got {base!r}")
        if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
            raise ValueError(f"randomized: max_len must be a positive integer, got {max_len!r}")
        if eval_positions not in EVAL_POSITIONS:
            raise ValueError(f"randomized: eval_positions must be one of {', '.join(EVAL_POSITIONS)}, got {eval_positions!r}")
        self.base, self.max_len, self.eval_positions = base, max_len, eval_positions
        self.inner = registry.get(base)(cfg)

    def sample(self, length: int, device) -> torch.Tensor:
        """(length,) int64: an ordered random subset of [0, max_len)."""
        if length > self.max_len:
            what = "a training" if self.training else "an evaluated"
            raise ValueError(
                f"randomized: {what} sequence of {length} tokens is longer than max_len "
                f"{self.max_len}; allowed: max_len >= the longest sequence drawn for"
            )
        return torch.randperm(self.max_len, device=device)[:length].sort().values

    def prepare(self, q_pos, k_pos, dtype) -> Drawn:
        draws = self.training or self.eval_positions == "sampled"
        if draws and k_pos.shape != q_pos.shape and not self.training:
            raise ValueError(
                "randomized: eval_positions 'sampled' draws the positions of each full forward; "
                "decoding through a KV cache needs eval_positions 'given'"
            )
        if not draws or k_pos.shape != q_pos.shape:  # evaluation at the given positions, or a KV cache
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
        return f"name={self.name!r}, base={self.base!r}, max_len={self.max_len}, eval_positions={self.eval_positions!r}"

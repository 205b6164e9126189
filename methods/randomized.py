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
import torch

from posbench import registry
from posbench.method import PositionMethod
from posbench.registry import register

BASES = ("rotary", "sinusoidal")


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
        self._drawn: tuple[torch.Tensor, torch.Tensor] | None = None  # (given pos, sampled pos)

    def sample(self, length: int, device) -> torch.Tensor:
        """(length,) int64: an ordered random subset of [0, max_len)."""
        if length > self.max_len:
            raise ValueError(f"randomized: a training sequence of {length} tokens is longer than max_len "
                             f"{self.max_len}; allowed: max_len >= the training length")
        return torch.randperm(self.max_len, device=device)[:length].sort().values

    def embed(self, x, pos):
        self._drawn = None
        if self.training:
            self._drawn = (pos, self.sample(pos.shape[0], pos.device))
            pos = self._drawn[1]
        return self.inner.embed(x, pos)

    def attend(self, q, k, v, q_pos, k_pos, layer):
        drawn = self._drawn
        if self.training and drawn is not None and drawn[0] is q_pos and k_pos.shape == q_pos.shape:
            # The same draw in every layer of this forward (training has no KV cache: k_pos is q_pos).
            q_pos = k_pos = drawn[1]
        return self.inner.attend(q, k, v, q_pos, k_pos, layer)

    def extra_repr(self) -> str:
        return f"name={self.name!r}, base={self.base!r}, max_len={self.max_len}"

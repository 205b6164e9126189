"""Rotary with LongRoPE's per-pair rescale factors (Ding et al. 2024, "LongRoPE: Extending LLM
Context Window Beyond 2 Million Tokens", ICML; as Phi-3 uses it: Hugging Face's
``_compute_longrope_parameters``).

Each pair i has its own factor: theta_i' = theta_i / lambda_i, with the vector ``short_factor``
while the evaluation length L is at most L0 = L_train and ``long_factor`` beyond (so the angles
depend on the length: keys are rotated per step under a KV cache), and cos and sin are scaled by
the attention factor sqrt(1 + ln(s) / ln(L0)) (1 when s <= 1). s is ``factor``: null (the default)
is s = max(1, L / L_train), so within L_train the row is ``rotary`` when the short factors are 1.

LongRoPE finds its factors by search, per model and target length; Phi-3 ships them in its
config. posbench's defaults are not searched factors: ``short_factor`` null is all 1 and
``long_factor`` null is NTK-aware scaling written per pair, lambda_i = s^(2i / (d - 2)) (1 for the
highest frequency, s for the lowest; NTK is one of the starting points of LongRoPE's search).
Give both vectors (hd/2 numbers each; Phi-3's for its head dim) for the method itself.
"""

import math

import torch

from posbench.core import registry
from posbench.core.registry import register

Rotary = registry.get("rotary")


def _vector(what: str, value, pairs: int) -> list[float] | None:
    """The option as a list of ``pairs`` positive numbers (None stays None), else one line."""
    if value is None:
        return None
    ok = (
        isinstance(value, (list, tuple))
        and len(value) == pairs
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0 for v in value)
    )
    if not ok:
        raise ValueError(
            f"rotary_longrope: {what} must be a list of {pairs} positive numbers (one per channel pair "
            f"of head_dim {2 * pairs}) or null, got {value!r}"
        )
    return [float(v) for v in value]


@register
class RotaryLongRope(Rotary):
    name = "rotary_longrope"
    scalings = ("longrope",)
    length_dependent = ("longrope",)  # short or long factors: by the evaluation length

    def __init__(
        self,
        cfg,
        factor: float | None = None,
        train_len: int | None = None,
        base: float = 10000.0,
        short_factor: list[float] | None = None,
        long_factor: list[float] | None = None,
    ):
        pairs = cfg.head_dim // 2
        short, long = _vector("short_factor", short_factor, pairs), _vector("long_factor", long_factor, pairs)
        super().__init__(cfg, base=base, scaling="longrope", factor=factor, train_len=train_len)
        self.short_factor, self.long_factor = short, long

    def rescale(self, s: float, L_train: int, length: int | None) -> torch.Tensor:
        """lambda (hd/2,) float64: the long factors past L0, else the short ones."""
        pairs = self.cfg.head_dim // 2
        if L_train and length is not None and length > L_train:
            if self.long_factor is not None:
                return torch.tensor(self.long_factor, dtype=torch.float64)
            i2 = torch.arange(0, 2 * pairs, 2, dtype=torch.float64)
            return s ** (i2 / (2 * pairs - 2)) if pairs > 1 else torch.full((1,), s, dtype=torch.float64)
        if self.short_factor is not None:
            return torch.tensor(self.short_factor, dtype=torch.float64)
        return torch.ones(pairs, dtype=torch.float64)

    def scaled_inv_freq(self, s: float, L_train: int, length: int | None = None) -> tuple[torch.Tensor, float]:
        theta = self.base_inv_freq()  # (hd/2,) float64
        self.need_train_len(s, L_train)
        lam = self.rescale(s, L_train, length).to(theta.device)
        # L0 = 1 has ln 0: no length to extend from, and s > 1 needs L_train (above)
        attention = math.sqrt(1 + math.log(s) / math.log(L_train)) if s > 1.0 and L_train > 1 else 1.0
        return theta / lam, attention

    def extra_repr(self) -> str:
        given = [n for n in ("short_factor", "long_factor") if getattr(self, n) is not None]
        return f"name={self.name!r}, factor={self.factor}, vectors={'given: ' + ', '.join(given) if given else 'default'}"

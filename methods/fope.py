"""FoPE: Fourier Position Embedding (Hua et al. 2025, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", ICML; arXiv 2412.17739).

RoPE gives channel pair m of a head one frequency w_m = base^(-2m/hd): q_m(n) = q_m e^{i w_m n}.
FoPE makes each pair a Fourier series over the frequencies, and zeroes the frequencies too low to
complete a period within the training length L_train (their "undertrained" components):

    w'_m = w_m if w_m >= 2 pi / L_train else 0                          (floor frequency)
    S_{h,m}(n) = e^{i w'_m n} + sum_{k != m, w'_k > 0} a_{h,m,k} e^{i w'_k n}
    q_m(n) <- q_m S_{h,m}(n),   k_m(n) <- k_m S_{h,m}(n)

as a real rotation of the pair (x1, x2) = (channel m, channel m + hd/2): x1 Re S - x2 Im S,
x2 Re S + x1 Im S. A pair with w'_m = 0 is left as it is (no series). The coefficients
a ~ N(0, sigma^2 / M) (M: the pairs kept; ``sigma`` default 0.3) are drawn once per key head and
not trained (the paper's coefficients are fixed), saved with the model. L_train is the option
``train_len``, or (null, the default) the longest training sequence seen, recorded in the first
training forward as ``rotary``'s scalings record it; before any training no frequency is zeroed.
Keys are encoded before the KV cache; a query head reads its key head's coefficients (GQA).
"""

import math
from typing import NamedTuple

import torch

from posbench.core.method import PositionMethod, causal_attention
from posbench.core.registry import register


class FourierState(NamedTuple):
    re: torch.Tensor  # (Hkv, T, hd/2): Re S at the positions of this forward's queries
    im: torch.Tensor


def rotate_pairs(x: torch.Tensor, re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, hd) times S per pair (m, m + hd/2); re, im (H, T, hd/2) float32 or float64."""
    x1, x2 = x.to(re.dtype).chunk(2, -1)
    return torch.cat([x1 * re - x2 * im, x2 * re + x1 * im], -1).to(x.dtype)


@register
class FourierPositionEmbedding(PositionMethod):
    name = "fope"

    def __init__(self, cfg, base: float = 10000.0, sigma: float = 0.3, train_len: int | None = None):
        super().__init__(cfg)
        if not (isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and sigma >= 0):
            raise ValueError(f"fope: sigma must be a number >= 0, got {sigma!r}")
        if train_len is not None and not (isinstance(train_len, int) and not isinstance(train_len, bool) and train_len >= 1):
            raise ValueError(f"fope: train_len must be a positive integer or null (recorded in training), got {train_len!r}")
        if not (isinstance(base, (int, float)) and base > 1):
            raise ValueError(f"fope: base must be a number > 1, got {base!r}")
        half = cfg.head_dim // 2
        self.base, self.sigma, self.train_len = float(base), float(sigma), train_len
        inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2 / cfg.head_dim)
        self.register_position_buffer("inv_freq", inv_freq.float())
        coef = torch.randn(cfg.kv_heads, half, half) * (sigma / math.sqrt(half))
        # (Hkv, m, k): the weight of frequency k in pair m's series; its own frequency weighs 1
        self.register_position_buffer("fourier_coef", coef * (1 - torch.eye(half)), persistent=True)
        self.register_buffer("trained_len", torch.tensor(train_len or 0))

    def kept(self) -> torch.Tensor:
        """(hd/2,) bool: the pairs whose frequency completes a period within L_train (all of them
        before L_train is known)."""
        L = self.trained_len
        return (self.inv_freq * L >= 2 * math.pi) | (L == 0)

    def series(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Re S, Im S (Hkv, T, hd/2) at positions pos (T,): angles in float64 (an angle near
        16384 rad keeps its digits), the tables in float32 (float64 for float64 q and k)."""
        keep = self.kept().double()
        ang = pos.double()[:, None] * (self.inv_freq.double() * keep)[None, :]  # (T, hd/2): w'_m n
        mix = self.fourier_coef.double() * keep[None, :, None] * keep[None, None, :]  # kept pairs only
        re, im = ang.cos(), ang.sin()
        out = torch.float64 if dtype == torch.float64 else torch.float32
        return (re + torch.einsum("tk,hmk->htm", re, mix)).to(out), (im + torch.einsum("tk,hmk->htm", im, mix)).to(out)

    def for_heads(self, table: torch.Tensor, heads: int) -> torch.Tensor:
        """A per-key-head table for ``heads`` heads: query head h reads key head h // G."""
        return table if heads == table.shape[0] else table.repeat_interleave(heads // table.shape[0], 0)

    def prepare(self, q_pos, k_pos, dtype) -> FourierState:
        if self.training and self.train_len is None:
            self.trained_len.clamp_(min=k_pos.shape[0])  # on the device: no host sync
        return FourierState(*self.series(q_pos, dtype))

    def encode_qk(self, q, k, layer, state: FourierState):
        h, hkv = q.shape[1], k.shape[1]
        return (
            rotate_pairs(q, self.for_heads(state.re, h), self.for_heads(state.im, h)),
            rotate_pairs(k, self.for_heads(state.re, hkv), self.for_heads(state.im, hkv)),
        )

    def attend(self, q, k, v, q_pos, k_pos, layer, state: FourierState | None = None):
        if state is None:  # raw q, k outside a model forward: encode them all here
            re, im = self.series(k_pos, q.dtype)
            tq, h = q.shape[-2], q.shape[1]
            q = rotate_pairs(q, self.for_heads(re, h)[:, -tq:], self.for_heads(im, h)[:, -tq:])
            k = rotate_pairs(k, self.for_heads(re, k.shape[1]), self.for_heads(im, k.shape[1]))
        return causal_attention(q, k, v, window=self.window(layer))

    def extra_repr(self) -> str:
        return f"name={self.name!r}, base={self.base:g}, sigma={self.sigma:g}, train_len={self.train_len}"

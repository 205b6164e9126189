"""FoPE: Fourier Position Embedding (Hua et al. 2025, "Fourier Position Embedding: Enhancing
Attention's Periodic Extension for Length Generalization", ICML; arXiv 2412.17739).

RoPE gives channel pair m of a head one frequency w_m = base^(-2m/hd): q_m(n) = q_m e^{i w_m n}.
FoPE makes each pair a Fourier series over the frequencies, and zeroes the frequencies too low to
complete a period within the training length L_train (their "undertrained" components):
w'_m = w_m if w_m >= 2 pi / L_train else 0 (floor frequency). A pair m is rotated by (C_m, S_m),
as a real rotation of (x1, x2) = (channel m, channel m + hd/2): x1 C - x2 S, x2 C + x1 S.

``coefficients: authors`` (the default) is the authors' released code: yiju-zhao/
Fourier-Position-Embedding, olmo/model.py ``FourierEmbedding`` at commit 3713108e7078bf8b21984d1be3225ea55e276f09,
with its config defaults (olmo/config.py: fourier_init eye_xavier_norm, gain 0.3,
fourier_separate_basis, fourier_separate_head, fourier_ignore_zero, not learnable). The K
frequencies kept (w'_k > 0, the first K pairs) feed d = min(K, hd/4) output pairs through two
tables, one for cosines and one for sines:

    C_m(n) = sum_k cos(w_k n) Ac_{h,k,m},   S_m(n) = sum_k sin(w_k n) As_{h,k,m}   (m < d)
    C_m = S_m = 1                                                                (m >= d: padded)
    A = N(0, std^2) + E,  std = sigma sqrt(2 / ((K + H) d))   (xavier_normal of an (H, K, d) table)

E the authors' "step eye" (E_{k,m} = 1 where k = m ceil(K / d)); ``sigma`` (0.3) is their gain.
At the CPU shape (hd 32, H 4, L_train 64: K 5, d 5) std is 0.063. The tables are drawn once per
key head (the authors' are per head: the same under multi-head attention; under GQA a query head
reads its key head's), not trained, saved with the model: two N(0, 1) tables whose std, mask and
eye follow K, so L_train may be recorded after they are drawn.

``coefficients: paper`` is posbench's earlier reading of the paper's equations, one table for both:

    S_{h,m}(n) = e^{i w'_m n} + sum_{k != m, w'_k > 0} a_{h,m,k} e^{i w'_k n},  C = Re S, S = Im S,
    a ~ N(0, sigma^2 / M) (M: the pairs kept); a pair with w'_m = 0 is left as it is.

L_train is the option ``train_len``, or (null, the default) the longest training sequence seen,
recorded in the first training forward as ``rotary``'s scalings record it; before any training no
frequency is zeroed. Keys are encoded before the KV cache.
"""

import math
from typing import NamedTuple

import torch

from posbench.core import causal
from posbench.core.method import PositionMethod
from posbench.core.registry import register

COEFFICIENTS = ("authors", "paper")


class FourierState(NamedTuple):
    re: torch.Tensor  # (Hkv, T, hd/2): C at the positions of this forward's queries
    im: torch.Tensor  # S


def rotate_pairs(x: torch.Tensor, re: torch.Tensor, im: torch.Tensor) -> torch.Tensor:
    """x (B, H, T, hd) times S per pair (m, m + hd/2); re, im (H, T, hd/2) float32 or float64."""
    x1, x2 = x.to(re.dtype).chunk(2, -1)
    return torch.cat([x1 * re - x2 * im, x2 * re + x1 * im], -1).to(x.dtype)


@register
class FourierPositionEmbedding(PositionMethod):
    name = "fope"

    def __init__(
        self, cfg, base: float = 10000.0, sigma: float = 0.3, train_len: int | None = None, coefficients: str = "authors"
    ):
        super().__init__(cfg)
        if coefficients not in COEFFICIENTS:
            raise ValueError(f"fope: coefficients must be one of {', '.join(COEFFICIENTS)}, got {coefficients!r}")
        if not (isinstance(sigma, (int, float)) and not isinstance(sigma, bool) and sigma >= 0):
            raise ValueError(f"fope: sigma must be a number >= 0, got {sigma!r}")
        if train_len is not None and not (isinstance(train_len, int) and not isinstance(train_len, bool) and train_len >= 1):
            raise ValueError(f"fope: train_len must be a positive integer or null (recorded in training), got {train_len!r}")
        if not (isinstance(base, (int, float)) and base > 1):
            raise ValueError(f"fope: base must be a number > 1, got {base!r}")
        half = cfg.head_dim // 2
        self.base, self.sigma, self.train_len, self.coefficients = float(base), float(sigma), train_len, coefficients
        inv_freq = base ** (-torch.arange(half, dtype=torch.float64) * 2 / cfg.head_dim)
        self.register_position_buffer("inv_freq", inv_freq.float())
        if coefficients == "paper":
            coef = torch.randn(cfg.kv_heads, half, half) * (sigma / math.sqrt(half))
            # (Hkv, m, k): the weight of frequency k in pair m's series; its own frequency weighs 1
            self.register_position_buffer("fourier_coef", coef * (1 - torch.eye(half)), persistent=True)
        else:
            # (Hkv, k, m): N(0, 1) draws of the sine and cosine tables (frequency k into pair m);
            # ``authors_tables`` scales them and adds the eye once K is known
            self.register_position_buffer("sin_noise", torch.randn(cfg.kv_heads, half, half), persistent=True)
            self.register_position_buffer("cos_noise", torch.randn(cfg.kv_heads, half, half), persistent=True)
        self.register_buffer("trained_len", torch.tensor(train_len or 0))

    def kept(self) -> torch.Tensor:
        """(hd/2,) bool: the pairs whose frequency completes a period within L_train (all of them
        before L_train is known)."""
        L = self.trained_len
        return (self.inv_freq * L >= 2 * math.pi) | (L == 0)

    def authors_tables(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(cosine table, sine table (Hkv, hd/2, hd/2) float64 indexed [h, k, m], zero outside
        k < K and m < d; the (hd/2,) mask of the output pairs m < d): the authors' eye_xavier_norm
        init for K kept frequencies, computed on the device (K a tensor: no host sync)."""
        half = self.inv_freq.shape[0]
        ks = torch.arange(half, device=self.inv_freq.device, dtype=torch.float64)
        n_kept = self.kept().double().sum()  # K: the kept frequencies are the first K (w falls with m)
        d = torch.minimum(n_kept, torch.tensor(float(self.cfg.head_dim // 4), dtype=torch.float64, device=ks.device))
        inside = (ks[:, None] < n_kept) & (ks[None, :] < d)  # (k, m)
        # xavier_normal_ of an (H, K, d) tensor: fan_in K d, fan_out H d
        std = self.sigma * torch.sqrt(2 / ((n_kept + self.cfg.n_heads) * d).clamp(min=1))
        step = torch.ceil(n_kept / d.clamp(min=1))
        eye = ks[:, None] == ks[None, :] * step  # the authors' step eye: E[m ceil(K/d), m] = 1
        tables = [torch.where(inside, noise.double() * std + eye.double(), 0.0) for noise in (self.cos_noise, self.sin_noise)]
        return tables[0], tables[1], ks < d

    def series(self, pos: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """C, S (Hkv, T, hd/2) at positions pos (T,): angles in float64 (an angle near 16384 rad
        keeps its digits), the tables in float32 (float64 for float64 q and k)."""
        out = torch.float64 if dtype == torch.float64 else torch.float32
        keep = self.kept().double()
        ang = pos.double()[:, None] * (self.inv_freq.double() * keep)[None, :]  # (T, hd/2): w'_k n
        if self.coefficients == "authors":
            cos_table, sin_table, used = self.authors_tables()
            re = torch.einsum("tk,hkm->htm", ang.cos(), cos_table)
            im = torch.einsum("tk,hkm->htm", ang.sin(), sin_table)
            # the pairs past d: C = S = 1, as the authors' F.pad(..., value=1)
            return re.masked_fill(~used, 1.0).to(out), im.masked_fill(~used, 1.0).to(out)
        mix = self.fourier_coef.double() * keep[None, :, None] * keep[None, None, :]  # kept pairs only
        re, im = ang.cos(), ang.sin()
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
        return causal.causal_sdpa(q, k, v, window=self.window(layer))

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, base={self.base:g}, sigma={self.sigma:g}, train_len={self.train_len}, "
            f"coefficients={self.coefficients!r}"
        )

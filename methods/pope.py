"""PoPE: Polar Coordinate Position Embeddings (Gopalakrishnan, Csordas, Schmidhuber, Mozer 2025,
"Decoupling the 'What' and 'Where' With Polar Coordinate Positional Embeddings", arXiv 2509.10534).

RoPE rotates pairs of channels, so a query's content sets both the size and the angle of each
pair: what and where mix. PoPE gives every channel c of a head (hd of them, not hd/2 pairs) its
own complex number, the magnitude from content and the phase from position alone:

    q_c(m) = softplus(q_c) e^{i m theta_c},   k_c(n) = softplus(k_c) e^{i (n theta_c + delta_c)}
    score(m, n) = Re sum_c q_c(m) conj(k_c(n)) / sqrt(hd)
                = sum_c softplus(q_c) softplus(k_c) cos((m - n) theta_c - delta_c) / sqrt(hd)

with theta_c = base^(-c/hd) and a learned phase bias delta (per key head and channel, 0 at start,
clamped to [-2 pi, 0]). Encoded, q and k are 2 hd real channels, [|q| cos, |q| sin]; the keys
enter the KV cache so (twice rotary's key bytes). Values are not touched.

``scale``: the logits' scale. ``head_dim`` (default) is 1/sqrt(hd) of the equation above, the
transformer's scale over the hd complex channels of the paper's a = Re[q^H k] (the query is
multiplied by sqrt 2 so that SDPA's 1/sqrt(2 hd) over 2 hd real channels is it); ``doubled`` is
1/sqrt(2 hd), what lucidrains' PoPE-pytorch does by handing the 2 hd channels to attention at
its default scale. The authors' own code was not in reach to settle which they train with.

SDPA's CPU flash kernel wants one head width for q, k and v: the values (hd) are padded with
zeros to the keys' 2 hd and the padding dropped after, so attention stays on the flash path
instead of SDPA's math path with its (B, H, L, L) scores (issue 68). A CPU training forward takes
that flash forward and the blocked backward of ``posbench.core.causal`` (GEMMs by query
blocks, the causal triangle skipped), where the values' side runs at their own width hd, not 2 hd.
"""

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from posbench.core import causal
from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import causal_flash_attention
from posbench.core.method import PositionMethod, causal_attention
from posbench.core.registry import register

# The query's factor that gives each ``scale`` from SDPA's 1/sqrt(2 hd).
SCALES = {"head_dim": math.sqrt(2), "doubled": 1.0}


class PolarState(NamedTuple):
    angle: torch.Tensor  # (Tq, hd) float64: m theta_c at this forward's positions


@register
class PolarPositionEmbedding(PositionMethod):
    name = "pope"

    def __init__(self, cfg, base: float = 10000.0, scale: str = "head_dim"):
        super().__init__(cfg)
        if not (isinstance(base, (int, float)) and not isinstance(base, bool) and base > 1):
            raise ValueError(f"pope: base must be a number > 1, got {base!r}")
        if scale not in SCALES:
            raise ValueError(f"pope: scale must be one of {', '.join(SCALES)}, got {scale!r}")
        self.base, self.scale = float(base), scale
        self.query_gain = SCALES[scale]  # times SDPA's 1/sqrt(2 hd)
        hd = cfg.head_dim
        self.register_position_buffer("inv_freq", (base ** (-torch.arange(hd, dtype=torch.float64) / hd)).float())
        self.phase_bias = nn.Parameter(torch.zeros(cfg.n_layers, cfg.kv_heads, hd))  # (L, Hkv, hd): delta

    def angles(self, pos: torch.Tensor) -> torch.Tensor:
        """(T, hd) float64: pos * theta_c."""
        return pos.double()[:, None] * self.inv_freq.double()[None, :]

    def polar(self, x: torch.Tensor, angle: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        """x (B, H, T, hd) -> (B, H, T, 2 hd): softplus(x) (cos, sin) of angle (H or 1, T, hd)."""
        cdt = torch.float64 if x.dtype == torch.float64 else torch.float32
        mag = F.softplus(x.to(cdt)) * scale
        return torch.cat([mag * angle.cos().to(cdt), mag * angle.sin().to(cdt)], -1).to(x.dtype)

    def key_angle(self, angle: torch.Tensor, heads: int, layer: int) -> torch.Tensor:
        """(heads, T, hd): n theta_c + delta_c, query head h reading key head h // G's delta."""
        delta = self.phase_bias[layer].clamp(-2 * math.pi, 0.0).double()  # (Hkv, hd)
        if heads != delta.shape[0]:
            delta = delta.repeat_interleave(heads // delta.shape[0], 0)
        return angle[None] + delta[:, None, :]

    def prepare(self, q_pos, k_pos, dtype) -> PolarState:
        return PolarState(self.angles(q_pos))

    def encode_qk(self, q, k, layer, state: PolarState):
        return self.polar(q, state.angle[None], self.query_gain), self.polar(k, self.key_angle(state.angle, k.shape[1], layer))

    def attend(self, q, k, v, q_pos, k_pos, layer, state: PolarState | None = None):
        if state is None:  # raw q, k outside a model forward: encode them all here
            angle = self.angles(k_pos)
            q = self.polar(q, angle[None, -q.shape[-2] :], self.query_gain)
            k = self.polar(k, self.key_angle(angle, k.shape[1], layer))
        window = self.window(layer)
        if causal.blocked_here(q, k, v, window):
            # a CPU training forward: the flash forward (values padded), the blocked backward at the
            # values' own width, at every length (one layer, L 256 to 2048: 0.82-0.89 of SDPA's)
            return causal_flash_attention(q, k, v)
        hd = v.shape[-1]
        vp = F.pad(v, (0, k.shape[-1] - hd))  # (B, H, Tk, 2 hd): zeros, one head width for the kernel
        return causal_attention(q, k, vp, window=window)[..., :hd]

    def attn_backend(self, device, dtype) -> str:
        if flash_here(device) and dtype in (torch.float32, torch.float64):
            return "cpu flash op, keys of 2 x head_dim (polar form), values padded; blocked backward at head_dim"
        return "sdpa causal, keys of 2 x head_dim (polar form), values padded to them"

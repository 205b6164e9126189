"""CoPE: Contextual Position Encoding (Golovneva, Wang, Weston, Sukhbaatar 2024, "Contextual
Position Encoding: Learning to Count What's Important").

No position embeddings; positions are counted from the context. For query i and key j <= i:

    g_ij = sigmoid(s_ij),             s_ij = q_i . k_j / sqrt(hd)   (the gate of each key)
    p_ij = sum_{t=j..i} g_it          (a fractional count of the keys from j to i)
    z_ij = s_ij + q_i . e[p_ij]       e[p] interpolated: e[p] = (1 - w) e[floor p] + w e[ceil p]

with p clamped to ``npos_max`` - 1 and w = p - floor p, then softmax_j(z_ij). As in the paper's
reference code (its appendix), the gate reads the scaled logit q . k / sqrt(hd) and the position
logit q . e[p] is added unscaled; q . e[p] is taken for the npos_max integer positions once
(q_i . e[0..npos_max-1]) and interpolated there. One table e (npos_max, hd) per layer, shared by
the heads, zero at start (the paper's). Positions are not read, so interpolated positions change
nothing; decoding recomputes the gates of the cached keys with the new query (no extra cache).
Attention is the explicit float32 path: p_ij needs the (B, H, Tq, Tk) gates.
"""

import math

import torch
from torch import nn

from posbench.core.method import PositionMethod, causal_mask
from posbench.core.registry import register


def cope_logits(q, k, table: torch.Tensor, npos_max: int, window: int | None = None) -> torch.Tensor:
    """(B, H, Tq, Tk) CoPE logits z_ij in q's compute dtype (float32 or float64), -inf on future
    keys (and on keys older than ``window``); q (B, H, Tq, hd), k (B, H, Tk, hd), table (npos_max, hd)."""
    tq, tk = q.shape[-2], k.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
    scores = scores.masked_fill(~causal_mask(tq, tk, q.device, window), float("-inf"))
    # 0 on future keys and outside the window: p_ij counts keys j..i only, so a window changes no
    # position of a key it keeps
    gates = torch.sigmoid(scores)
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos_max - 1)  # p_ij = sum_{t >= j} g_it
    floor = pos.floor()
    w = pos - floor
    at_int = q @ table.to(q.dtype).t()  # (B, H, Tq, npos_max): q_i . e[p] at integer p
    low = at_int.gather(-1, floor.long())
    high = at_int.gather(-1, pos.ceil().long())
    return scores + low * (1 - w) + high * w


@register
class CoPE(PositionMethod):
    name = "cope"

    def __init__(self, cfg, npos_max: int = 64):
        super().__init__(cfg)
        if not (isinstance(npos_max, int) and npos_max >= 2):
            raise ValueError(f"cope: npos_max must be an integer >= 2, got {npos_max!r}")
        self.npos_max = npos_max
        self.table = nn.Parameter(torch.zeros(cfg.n_layers, npos_max, cfg.head_dim))  # (L, npos_max, hd)

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
        z = cope_logits(q.to(cdt), k.to(cdt), self.table[layer], self.npos_max, self.window(layer))
        return (z.softmax(-1) @ v.to(cdt)).to(v.dtype)

    def attn_backend(self, device, dtype) -> str:
        return "explicit float32 (B*H*L*L gates, positions and scores)"

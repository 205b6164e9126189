"""Stick-breaking attention (Tan, Shen, Yang, Courville, Panda 2025, "Scaling Stick-Breaking
Attention: An Efficient Implementation and In-depth Study", ICLR; arXiv 2410.17980).

No softmax and no position encoding: query i breaks a stick over its earlier keys, nearest first.
With z_ij = q_i . k_j / sqrt(hd) and beta_ij = sigmoid(z_ij), for j < i

    A_ij = beta_ij prod_{j<k<i} (1 - beta_ik),    o_i = sum_{j<i} A_ij v_j (+ the remainder)

(``attend_current`` lets key i take part too, j <= i). What becomes of the stick's remainder
r_i = 1 - sum_j A_ij is ``remainder``:

- ``none`` (default): left out, as the authors' released layers do: flash-linear-attention's
  ``StickBreakingAttention`` (fla-org/flash-linear-attention, ``fla/layers/stickbreaking_attn.py``
  at 7bbb8fafb92f, ``o, _rem = parallel_stickbreaking_attn(...)``) and dolomite-engine's
  ``SBAttention`` with ``sb_remainder`` off (IBM/dolomite-engine,
  ``dolomite_engine/hf_models/modeling_utils/attention_block/stickbreaking_attention.py`` at
  2fb795e25965);
- ``learned``: o_i + r_i b_h with b_h a learned vector per layer and head (zeros at start), as
  dolomite-engine's later layer does (``.../sequence_mixer_blocks/stickbreaking_attention.py`` at
  2b7068c69c72, ``head_bias``);
- ``self``: o_i + r_i v_i, the query's own value, as the authors' kernel test reference does
  (shawntan/stickbreaking-attention, ``test_attn.py`` in its tests folder at ea69b8dd40ea, ``ref_fwd``).

In log space: log A_ij = logsigmoid(z_ij) + sum_{j<k<i} logsigmoid(-z_ik). Training and
evaluation take ``posbench.attention.stick_blocks`` (blocks of ``chunk`` keys, one cumulative sum
per block, matmuls for the rest, memory O(L x chunk)); ``stick_breaking`` here is the plain
reference its tests compare against (query rows in chunks, a reversed cumulative sum along each
row). Order comes from the nearest-first product alone, so positions are never read. A sliding
window hides the older keys (their A is 0). A Triton kernel exists (the authors'
stickbreaking-attention package, fla's ``stickbreaking_attn``); posbench runs PyTorch everywhere.
"""

import torch
import torch.nn.functional as F
from torch import nn

from posbench.attention.stick_blocks import stick_breaking_blocks
from posbench.core.masked import causal_mask
from posbench.core.method import PositionMethod
from posbench.core.registry import register

REMAINDERS = ("none", "learned", "self")


def stick_breaking(q, k, v, window=None, attend_current=False, chunk=128) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference: (o, rest) for q (B, H, Tq, hd), k, v (B, H, Tk, hd), bottom-right aligned
    (query i at key index i + Tk - Tq), o = sum_j A_ij v_j (B, H, Tq, hd) and rest = 1 - sum_j A_ij
    (B, H, Tq); query rows in chunks of ``chunk``."""
    tq, tk = q.shape[-2], k.shape[-2]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = q.shape[-1] ** -0.5
    outs, rests = [], []
    for start in range(0, tq, chunk):
        qc = q[..., start : start + chunk, :]
        rows = qc.shape[-2]
        z = (qc.to(cdt) * scale) @ k.to(cdt).transpose(-1, -2)  # (B, H, rows, Tk)
        # visible: earlier keys (and the query's own with attend_current), within the window
        seen = causal_mask(tq, tk, q.device, window)[start : start + rows]
        if not attend_current:
            i = torch.arange(start, start + rows, device=q.device)[:, None] + tk - tq
            seen = seen & (torch.arange(tk, device=q.device)[None, :] != i)
        log_keep = F.logsigmoid(-z).masked_fill(~seen, 0.0)  # log(1 - beta), 0 where not seen
        # sum over k > j of log(1 - beta_ik): a reversed cumulative sum, shifted one key right
        after = log_keep.flip(-1).cumsum(-1).flip(-1)
        after = torch.cat([after[..., 1:], after.new_zeros(*after.shape[:-1], 1)], -1)
        weights = (F.logsigmoid(z) + after).exp().masked_fill(~seen, 0.0)  # A_ij
        outs.append(weights @ v.to(cdt))
        rests.append(1 - weights.sum(-1))
    return torch.cat(outs, -2).to(q.dtype), torch.cat(rests, -1).to(q.dtype)


def own_values(v: torch.Tensor, tq: int) -> torch.Tensor:
    """v_i of the Tq queries, the last Tq of the keys' values: (B, H, Tq, hd)."""
    return v[..., v.shape[-2] - tq :, :]


@register
class StickBreaking(PositionMethod):
    name = "stickbreaking"

    def __init__(self, cfg, attend_current: bool = False, chunk: int = 128, remainder: str = "none"):
        super().__init__(cfg)
        if not isinstance(attend_current, bool):
            raise ValueError(f"stickbreaking: attend_current must be true or false, got {attend_current!r}")
        if not (isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1):
            raise ValueError(f"stickbreaking: chunk must be a positive integer (keys per block), got {chunk!r}")
        if remainder not in REMAINDERS:
            raise ValueError(f"stickbreaking: remainder must be one of {', '.join(REMAINDERS)}, got {remainder!r}")
        self.attend_current, self.chunk, self.remainder = attend_current, chunk, remainder
        if remainder == "learned":  # (L, H, hd): b_h per layer, zeros as dolomite-engine's head_bias
            self.head_bias = nn.Parameter(torch.zeros(cfg.n_layers, cfg.n_heads, cfg.head_dim))

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        o, rest = stick_breaking_blocks(q, k, v, self.window(layer), self.attend_current, self.chunk)
        return self.add_remainder(o, rest, v, layer)

    def add_remainder(self, o, rest, v, layer: int) -> torch.Tensor:
        """o (B, H, Tq, hd) with the stick's remainder rest (B, H, Tq) placed as ``remainder`` says."""
        if self.remainder == "self":
            return o + rest[..., None] * own_values(v, o.shape[-2])
        if self.remainder == "learned":
            return o + rest[..., None] * self.head_bias[layer].to(o.dtype)[None, :, None, :]
        return o

    def attn_backend(self, device, dtype) -> str:
        return f"stick-breaking PyTorch, log space, {self.chunk}-key blocks (no Triton kernel)"

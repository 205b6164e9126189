"""Stick-breaking attention (Tan, Shen, Yang, Courville, Panda 2025, "Scaling Stick-Breaking
Attention: An Efficient Implementation and In-depth Study", ICLR; arXiv 2410.17980).

No softmax and no position encoding: query i breaks a stick over its earlier keys, nearest first.
With z_ij = q_i . k_j / sqrt(hd) and beta_ij = sigmoid(z_ij), for j < i

    A_ij = beta_ij prod_{j<k<i} (1 - beta_ik)
    o_i  = sum_{j<i} A_ij v_j + (1 - sum_{j<i} A_ij) v_i

(the remainder of the stick goes to the query's own value, as the authors' reference does;
``attend_current`` lets key i take part too, j <= i). In log space, in float32:
log A_ij = logsigmoid(z_ij) + sum_{j<k<i} logsigmoid(-z_ik), the sum a reversed cumulative sum
along the row. Order comes from the nearest-first product alone, so positions are never read.
The reference computes the query rows in chunks of ``chunk`` (default 128): its memory is
O(L x chunk) per head, not O(L^2). A sliding window hides the older keys (their A is 0).
A Triton kernel exists (the authors' stickbreaking-attention package, fla's ``stickbreaking_attn``);
posbench runs the PyTorch reference on every device.
"""

import torch
import torch.nn.functional as F

from posbench.core.masked import causal_mask
from posbench.core.method import PositionMethod
from posbench.core.registry import register


def stick_breaking(q, k, v, window=None, attend_current=False, chunk=128) -> torch.Tensor:
    """o (B, H, Tq, hd) for q (B, H, Tq, hd), k, v (B, H, Tk, hd), bottom-right aligned: query i is
    at key index i + Tk - Tq; query rows in chunks of ``chunk``."""
    tq, tk = q.shape[-2], k.shape[-2]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale = q.shape[-1] ** -0.5
    outs = []
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
        own = v[..., tk - tq + start : tk - tq + start + rows, :].to(cdt)  # v_i of these queries
        outs.append(weights @ v.to(cdt) + (1 - weights.sum(-1, keepdim=True)) * own)
    return torch.cat(outs, -2).to(q.dtype)


@register
class StickBreaking(PositionMethod):
    name = "stickbreaking"

    def __init__(self, cfg, attend_current: bool = False, chunk: int = 128):
        super().__init__(cfg)
        if not isinstance(attend_current, bool):
            raise ValueError(f"stickbreaking: attend_current must be true or false, got {attend_current!r}")
        if not (isinstance(chunk, int) and not isinstance(chunk, bool) and chunk >= 1):
            raise ValueError(f"stickbreaking: chunk must be a positive integer (query rows per block), got {chunk!r}")
        self.attend_current, self.chunk = attend_current, chunk

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return stick_breaking(q, k, v, self.window(layer), self.attend_current, self.chunk)

    def attn_backend(self, device, dtype) -> str:
        return f"stick-breaking PyTorch reference, log space, {self.chunk}-row chunks (no Triton kernel)"

"""A softmax sink from the attention's log-sum-exp, on the CPU flash kernel (methods/sink.py).

A sink of logit s adds exp(s) to the softmax's denominator and nothing to the numerator, so with
lse_i = log sum_j exp(z_ij) the attention's own log-sum-exp,

    o'_i = sum_j exp(z_ij) v_j / (exp(s) + exp(lse_i)) = o_i * sigmoid(lse_i - s),

exactly: the flash kernel runs as it does without a sink (no extra key column, no float mask
that needs a gradient, causal blocks skipped) and the sink costs one sigmoid per row.
PyTorch's CPU flash op returns lse but gives it no gradient, hence ``FlashSink``'s own backward:
with w = sigmoid(lse - s) and g the output's gradient, the flash backward called with gradient
g w and output o' = o w gives q, k and v theirs exactly (the lse term -w (1 - w) (g . o) per row
lands in the kernel's row term D = rowsum(grad_out * out): D' = w^2 (g . o) = (g w) . o'), and
ds_h = -sum_{b,i} (g_i . o'_i)(1 - w_i). In the softmax backward's terms the lse's gradient
g_lse = w (1 - w) (g . o) enters as dS = P (dP - (D - g_lse)), D = rowsum(dO o): the pair
(g w, o w) carries exactly that, so any backward that takes (grad, out, lse) takes the sink. A
causal call of L queries against L keys with no mask takes plain causal attention's rule
(``posbench.core.causal``): the blocked GEMM backward (``key_bias_backward``) where SDPA's
scores at least 75% of the square and L >= 512, the flash op's own backward elsewhere.

``flash_sink_sdpa`` takes what ``F.scaled_dot_product_attention`` was given, or says None where
this path does not apply (another device, dropout, a mask that needs a gradient, another dtype):
``posbench.attention.modifiers.sdpa_with_sink``, the reference with one more key, does those.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posbench.core import causal as causal_rule
from posbench.core import cpu_flash
from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import key_bias_backward

DTYPES = (torch.float32, torch.float64)


class FlashSink(torch.autograd.Function):
    """o * sigmoid(lse - sink[h]) by the CPU flash op: q, k, v (B, H, T, d) one head width, sink
    (H,), mask None or a float mask in q's dtype broadcasting to (B, H, Tq, Tk), ``how`` the op's
    (is_causal, scale) and whether the backward is the blocked one (causal, Tq == Tk, no mask)."""

    @staticmethod
    def forward(ctx, q, k, v, sink, mask, how: tuple[bool, float, bool]):
        causal, scale, ctx.blocked = how
        o, lse = cpu_flash.flash_attention(q, k, v, causal, mask, scale)  # (B, H, Tq, d), (B, H, Tq)
        w = torch.sigmoid(lse - sink.to(lse.dtype)[:, None])  # (B, H, Tq): the real keys' share
        out = o * w[..., None].to(o.dtype)
        ctx.save_for_backward(q, k, v, out, lse, w, mask)
        ctx.causal, ctx.scale, ctx.sink_dtype = causal, scale, sink.dtype
        return out

    @staticmethod
    def backward(ctx, grad):
        q, k, v, out, lse, w, mask = ctx.saved_tensors
        grad_w = (grad * w[..., None].to(grad.dtype)).contiguous()
        if ctx.blocked:
            dq, dk, dv, _ = key_bias_backward(grad_w, (q, k, v, None, out, lse), scale=ctx.scale)
        else:
            dq, dk, dv = cpu_flash.flash_attention_backward(grad_w, q, k, v, out, lse, (ctx.causal, mask, ctx.scale))
        d_sink = -((grad * out).sum(-1) * (1 - w)).sum((0, 2))  # (H,)
        return dq, dk, dv, d_sink.to(ctx.sink_dtype), None, None


def flash_sink_sdpa(q, k, v, sink: torch.Tensor, options: dict) -> torch.Tensor | None:
    """SDPA(q, k, v, **options) with a sink of logit sink[h] per query head, by ``FlashSink``;
    None where that path does not apply. q (B, H, Tq, d), k (B, Hk, Tk, d), v (B, Hk, Tk, dv);
    ``options`` SDPA's (``modifiers.sdpa_options``), is_causal top-left as SDPA's."""
    mask = options["attn_mask"]
    if (
        not flash_here(q.device)
        or q.dtype not in DTYPES
        or options["dropout_p"] != 0.0
        or (mask is not None and mask.requires_grad)
        or q.dim() != 4
    ):
        return None
    tq, tk, d, dv = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
    scale = options["scale"] if options["scale"] is not None else 1.0 / math.sqrt(d)
    if k.shape[1] != q.shape[1]:  # grouped key heads (enable_gqa): query head h reads h // G
        k, v = (x.repeat_interleave(q.shape[1] // k.shape[1], 1) for x in (k, v))
    causal = bool(options["is_causal"])
    if causal and tq != tk:  # SDPA's is_causal is top-left aligned; the op's may not be
        mask, causal = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril(), False
    width = max(d, dv)  # the kernel wants one head width: zeros change no score and no value
    q, k, v = (F.pad(x, (0, width - x.shape[-1])) if x.shape[-1] < width else x for x in (q, k, v))
    blocked = causal and mask is None and causal_rule.takes_blocked(q, k, v, sink_path=True)
    out = FlashSink.apply(q, k, v, sink, float_mask(mask, q.dtype), (causal, scale, blocked))
    return out[..., :dv] if dv < width else out


def float_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """SDPA's mask as the flash op takes it: float in ``dtype``, -inf where a bool mask is False,
    four dimensions."""
    if mask is None:
        return None
    if mask.dtype == torch.bool:
        mask = torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
    mask = mask.to(dtype)
    while mask.dim() < 4:
        mask = mask[None]
    return mask

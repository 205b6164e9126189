"""Causal attention with a learnt bias per key, softmax_j(q_i . k_j / sqrt(hd) + c_j) v_j over j <= i,
with the gradient of c: fox's forget gates (c_j = -F_j). Tq == Tk, on a CPU with PyTorch's flash op.

Forward: one call of the CPU flash op at the model's head dim, c as a (B, H, 1, L) mask read with
stride 0 along the rows (ALiBi's ``key_bias_flash``). Backward: the flash op's backward returns no
gradient for its mask, so backward is FlashAttention's by query blocks in plain GEMMs (the blocked
path's, ``posbench.attention.blocked``), the probabilities rebuilt from each row's log-sum-exp:

    [q s, -lse, 1] log2(e) . [k, 1, c] = log2(e) (s q.k - lse + c)   -> P = exp2(that)
    [dO, -delta] . [v, 1]              = dP - delta                  -> dS = P (dP - delta)
    dS^T [q s, -lse, 1] log2(e)        -> dk (first hd columns), dc = column sums of dS (the last)

so c's gradient comes out of dk's GEMM with no pass of its own. Why not c as one more key column
through SDPA (``head_column_sdpa``, head dim hd + 1): at head dim 33 SDPA's CPU kernel ran 1.2x its
time at 32 (one thread, L 2048, forward + backward, this thread's CPU time), and padding to 40 or
48 cost more; this path keeps the forward at head dim 32 and the backward in GEMMs.

Each score is rounded at the magnitude of max |c| (float32: ~6e-8 of it), as the key-column path's:
callers bound |c| (fox: ``LINEAR_SPAN``).
"""

from __future__ import annotations

import math

import torch

from posbench.core import cpu_flash

LOG2E = 1.4426950408889634  # log2(e): exp(x) = exp2(x log2(e)), the blocked path's too
BACKWARD_ROWS = 64  # query rows per backward block: the blocked path's (docs/attention-plans.md)


def key_bias_forward(q, k, v, key_bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """q, k (B, H, L, hd), v (B, H, L, hv <= hd), key_bias (B, H, L) in q's dtype or None (plain
    causal attention) -> (out (B, H, L, hv), lse (B, H, L)). The flash op wants one head width:
    narrower values are padded with zeros for it (no score changes), the padding dropped after."""
    mask = None if key_bias is None else key_bias[:, :, None, :]  # (B, H, 1, L): stride 0 over the rows
    hd, hv = q.shape[-1], v.shape[-1]
    vp = torch.nn.functional.pad(v, (0, hd - hv)) if hv < hd else v
    out, lse = cpu_flash.flash_attention(q, k, vp, True, mask, 1.0 / math.sqrt(hd))
    return out[..., :hv], lse


def key_bias_backward(dout, saved: tuple, rows: int = BACKWARD_ROWS, scale: float | None = None) -> tuple[torch.Tensor, ...]:
    """(dq, dk, dv (B, H, L, hd), d key_bias (B, H, L) or None without one) of ``key_bias_forward``'s
    output, from ``saved`` = (q, k, v, key_bias, out, lse), by blocks of ``rows`` queries; each block
    sees only keys 0 .. its last row (the causal triangle skipped). ``scale``: the forward's score
    scale (None: 1 / sqrt(hd), ``key_bias_forward``'s)."""
    q, k, v, key_bias, out, lse = saved
    b, h, t, hd = q.shape
    hv, bh = v.shape[-1], b * h
    scale = 1.0 / math.sqrt(hd) if scale is None else scale
    ones = q.new_ones(b, h, t, 1)
    # (B*H, L, hd + e) and (B*H, L, hv + 1): contiguous batches of rows, made once; e = 2 with a
    # key bias ([q s, -lse, 1] . [k, 1, c]), else 1 ([q s, -lse] . [k, 1])
    qcols, kcols = [q * scale, -lse[..., None]], [k, ones]
    if key_bias is not None:
        qcols, kcols = [*qcols, ones], [*kcols, key_bias[..., None]]
    e = len(qcols) - 1
    qa = torch.cat(qcols, -1).mul_(LOG2E).reshape(bh, t, hd + e)
    ka = torch.cat(kcols, -1).reshape(bh, t, hd + e)
    va = torch.cat([v, ones], -1).reshape(bh, t, hv + 1)
    do = dout.to(q.dtype)
    doa = torch.cat([do, (do * out).sum(-1, keepdim=True).neg_()], -1).reshape(bh, t, hv + 1)  # [dO, -delta]
    dq = torch.empty(bh, t, hd, dtype=q.dtype, device=q.device)
    dka = torch.zeros(bh, t, hd + e, dtype=q.dtype, device=q.device)  # [dk, (unused), dc], times log2(e)
    dv = torch.zeros(bh, t, hv, dtype=q.dtype, device=q.device)
    future = torch.ones(rows, rows, dtype=torch.bool, device=q.device).triu_(1)  # the diagonal block's
    # one buffer each for every block's P and dS (a new tensor per block touches fresh pages)
    p_buf, ds_buf = (torch.empty(bh * min(rows, t) * t, dtype=q.dtype, device=q.device) for _ in range(2))
    for r0 in range(0, t, rows):
        n = min(rows, t - r0)
        nk = r0 + n  # keys 0 .. the block's last row
        qb, dob, kb, vb = qa[:, r0:nk], doa[:, r0:nk], ka[:, :nk], va[:, :nk]
        p = torch.bmm(qb, kb.transpose(1, 2), out=p_buf[: bh * n * nk].view(bh, n, nk))
        p.exp2_()  # (B*H, n, nk): exp(s q.k + c - lse)
        p[:, :, r0:].masked_fill_(future[:n, :n], 0.0)  # keys after each row (their exp may be inf)
        dv[:, :nk].baddbmm_(p.transpose(1, 2), dob[:, :, :hv])
        ds = torch.bmm(dob, vb.transpose(1, 2), out=ds_buf[: p.numel()].view(p.shape)).mul_(p)  # P (dP - delta)
        dq[:, r0:nk] = torch.bmm(ds, kb[:, :, :hd])
        dka[:, :nk].baddbmm_(ds.transpose(1, 2), qb)
    dka.mul_(1.0 / LOG2E)
    dka = dka.view(b, h, t, hd + e)
    dc = None if key_bias is None else dka[..., hd + 1]
    return dq.mul_(scale).view(b, h, t, hd), dka[..., :hd], dv.view(b, h, t, hv), dc


class KeyBiasAttention(torch.autograd.Function):
    """``key_bias_attention``'s autograd: the flash forward, the blocked backward."""

    @staticmethod
    def forward(ctx, q, k, v, key_bias):
        out, lse = key_bias_forward(q, k, v, key_bias)
        ctx.save_for_backward(q, k, v, key_bias, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):
        dq, dk, dv, dc = key_bias_backward(dout, ctx.saved_tensors)
        return dq, dk, dv, dc if ctx.needs_input_grad[3] else None  # a fixed bias (ALiBi's) gets none


def key_bias_attention(q, k, v, key_bias: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, H, L, hd) float32 or float64 on a CPU with ``cpu_flash.flash_here``, key_bias
    (B, H, L) -> causal softmax(q k^T / sqrt(hd) + key_bias[..., None, :]) v (B, H, L, hd)."""
    return KeyBiasAttention.apply(q, k, v, key_bias.to(q.dtype))


def causal_flash_attention(q, k, v) -> torch.Tensor:
    """Plain causal attention, q, k (B, H, L, hd), v (B, H, L, hv <= hd) as ``key_bias_attention``
    takes them: SDPA's CPU flash forward, the blocked GEMM backward (there at the values' own width)."""
    return KeyBiasAttention.apply(q, k, v, None)

"""Causal attention with a bias by query blocks, never an L x L square: FlashAttention's algorithm
in plain PyTorch ops, for a CPU and any device without a fused kernel. Each block sees only the
keys it may (the causal triangle skipped); backward recomputes the probabilities from each row's
log-sum-exp. Scores, softmax and bias are float32 (float64 for float64 inputs) whatever q's
dtype. With a sliding window a block also skips the keys older than its first query's window.
docs/attention-plans.md has the design and the timings.
"""

from __future__ import annotations

import math

import torch

from posbench.core import cpu_flash
from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import LOG2E

BLOCK_ROWS = 64  # rows per query block: 64 beat 128 and 256 at L 256 and 2048 on a CPU (docs/attention-plans.md)


def block_softmax(qb, kb, vb, tile) -> tuple[torch.Tensor, torch.Tensor]:
    """One query block's attention: qb (B, H, n, hd) already scaled, kb, vb (B, H, nk, hd), tile
    (h, n, nk) the bias with -inf on future keys -> (softmax(qb kb^T + tile) vb (B, H, n, hd),
    its log-sum-exp per row (B, H, n)). On a CPU, PyTorch's flash op with the tile as its mask
    (a strided view is read, never copied); elsewhere the same in plain ops."""
    if flash_here(qb.device):
        return cpu_flash.flash_attention(qb, kb, vb, False, tile[None], 1.0)
    s = torch.matmul(qb, kb.transpose(-1, -2)).add_(tile)  # (B, H, n, nk)
    m = s.amax(-1, keepdim=True)
    s.sub_(m).exp_()
    denom = s.sum(-1, keepdim=True)
    return torch.matmul(s, vb).div_(denom), m.add_(denom.log_()).squeeze(-1)


def window_start(r0: int, tq: int, tk: int, window: int | None) -> int:
    """The first key query rows r0.. see: the keys before it are older than the window of the
    block's first query (key index r0 + Tk - Tq); 0 without a window."""
    return 0 if window is None else max(0, r0 + tk - tq - window + 1)


def window_tile(tile: torch.Tensor, r0: int, n: int, nk: int, tq: int, tk: int, window: int | None):
    """A block's tile (h, n, nk), rows reversed, narrowed to keys k0 .. nk (k0 = ``window_start``)
    with -inf on the keys older than each row's window: (h, n, nk - k0). Without a window the tile itself."""
    if window is None:
        return tile
    k0 = window_start(r0, tq, tk, window)
    tile = tile[..., k0:]
    last = r0 + n - 1 + tk - tq  # key index of the block's last query (reversed row 0)
    if last - window < k0:  # every row's window starts at or before k0
        return tile
    a = last - torch.arange(n, device=tile.device)[:, None]  # (n, 1): key index of reversed row i'
    j = torch.arange(k0, nk, device=tile.device)[None, :]
    return tile.masked_fill(j <= a - window, float("-inf"))


def block_reversal(tq: int, rows: int, device) -> torch.Tensor:
    """(Tq,) int64: the index that reverses the rows within each block of ``rows`` (the last block
    may be shorter). Its own inverse: one ``index_select`` puts a tensor into the tiles' row order
    (rows reversed, so a Toeplitz tile is a view with strides +1) and back."""
    i = torch.arange(tq, device=device)
    r0 = i - i % rows  # each row's block start
    return r0 + (torch.clamp(r0 + rows, max=tq) - 1) - i


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype of the scores, softmax and bias: float64 for float64 inputs, else float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def scaled_queries(q: torch.Tensor, rows: int) -> torch.Tensor:
    """q (B, H, Tq, hd) in the tiles' row order (reversed within blocks), in the compute dtype, times
    1/sqrt(hd): scaled here (cheaper than the scores), contiguous so backward views it as (B*H, Tq, hd)."""
    rev = block_reversal(q.shape[2], rows, q.device)
    return q.index_select(2, rev).to(compute_dtype(q.dtype)).mul_(1.0 / math.sqrt(q.shape[-1]))


def call_kind(k: torch.Tensor, window: int | None, tensors: tuple) -> tuple[int | None, bool]:
    """(the window, None when no key is older than it; whether autograd wants gradients of ``tensors``)."""
    if window is not None and k.shape[-2] <= window:
        window = None  # nothing older than a window: the plain causal blocks
    return window, torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def blocked_forward(q, k, v, source, rows: int, window: int | None):
    """The blocked forward: (the output (B, H, Tq, hv) in v's dtype, what backward needs: (qs, kc, vc,
    out, lse), rows reversed within blocks)."""
    b, h, tq, hd = q.shape
    tk = k.shape[-2]
    cdt = compute_dtype(q.dtype)
    rev = block_reversal(tq, rows, q.device)
    # Every (B, H, Tq, .) tensor of the blocks is kept in the tiles' row order (reversed within
    # blocks): one gather here and one at the end instead of a flip per block.
    qs = scaled_queries(q, rows)
    kc, vc = k.to(cdt), v.to(cdt)  # no copy in float32: the model's k, v, which autograd keeps anyway
    out = torch.empty(b, h, tq, v.shape[-1], dtype=cdt, device=q.device)  # rows reversed within blocks
    lse = torch.empty(b, h, tq, dtype=cdt, device=q.device)  # log-sum-exp, rows reversed within blocks
    for r0 in range(0, tq, rows):
        n = min(rows, tq - r0)
        nk = r0 + n + tk - tq
        k0 = window_start(r0, tq, tk, window)
        tile = window_tile(source.tile(r0, n, nk), r0, n, nk, tq, tk, window)
        out[:, :, r0 : r0 + n], lse[:, :, r0 : r0 + n] = block_softmax(
            qs[:, :, r0 : r0 + n], kc[:, :, k0:nk], vc[:, :, k0:nk], tile
        )
    return out.index_select(2, rev).to(v.dtype), (qs, kc, vc, out, lse)


def blocked_backward(dout, saved: tuple, source, rows: int, window: int | None, want_bias_grads: bool):
    """The blocked backward from ``blocked_forward``'s ``saved``: (dq, dk, dv in dout's dtype, the
    source's gradients (``source.grads``), or None without ``want_bias_grads``)."""
    qs, kc, vc, out, lse = saved
    b, h, tq, hd = qs.shape
    rev = block_reversal(tq, rows, qs.device)  # the forward's row order (an arange: not worth saving)
    tk, hv, bh = kc.shape[-2], vc.shape[-1], b * h
    # (B*H, T, . + 1) batches of contiguous rows, made once here: keys and values with a column
    # of ones, so a block's queries with -lse and its dO with -delta in their extra column give
    # the probabilities' exponent and dP - delta straight from the GEMM (no pass of their own
    # over the block's (n, nk) scores). Queries and dO are in the tiles' row order, so a
    # block's rows are a view. Only tensors made here are reshaped: compiled, a saved tensor
    # may come in another layout than it had when traced, and inductor refuses to view it.
    ka = torch.cat([kc, kc.new_ones(b, h, tk, 1)], -1).reshape(bh, tk, hd + 1)
    va = torch.cat([vc, vc.new_ones(b, h, tk, 1)], -1).reshape(bh, tk, hv + 1)
    # [q, -lse] * log2(e): the probabilities are exp2 of the scores in base 2 (torch's exp2 is ~3x
    # faster than exp on a CPU, and stays fast where exp slows down on outputs below 1e-38)
    qa = torch.cat([qs, lse[..., None].neg()], -1).mul_(LOG2E).reshape(bh, tq, hd + 1)
    do = dout.to(qs.dtype).index_select(2, rev)
    neg_delta = (do * out).sum(-1, keepdim=True).neg_()  # (B, H, Tq, 1): -rowsum(dP * P) = -rowsum(dO * O)
    doa = torch.cat([do, neg_delta], -1).reshape(bh, tq, hv + 1)  # [dO, -delta]
    dq = torch.empty(bh, tq, hd, dtype=qs.dtype, device=qs.device)  # rows reversed within blocks
    dk = torch.zeros(bh, tk, hd, dtype=qs.dtype, device=qs.device)
    dv = torch.zeros(bh, tk, hv, dtype=qs.dtype, device=qs.device)
    acc = source.zero_grads() if want_bias_grads else None  # the tiles' gradients, summed over blocks
    # Each block's probabilities and dS are the first (B*H, n, nk) numbers of one buffer each, made
    # once: a new tensor per block touched fresh pages (the allocator returns large blocks to the
    # system), and the page faults cost as much as the bias's copy into the probabilities.
    size = bh * min(rows, tq) * tk
    p_buf, ds_buf = (torch.empty(size, dtype=qs.dtype, device=qs.device) for _ in range(2))
    for r0 in range(0, tq, rows):
        n = min(rows, tq - r0)
        nk = r0 + n + tk - tq
        k0 = window_start(r0, tq, tk, window)
        qb, dob = qa[:, r0 : r0 + n], doa[:, r0 : r0 + n]  # (B*H, n, . + 1)
        k_blk, v_blk = ka[:, k0:nk], va[:, k0:nk]
        tile, saved_tile = source.backward_tile(r0, n, nk)
        tile = window_tile(tile, r0, n, nk, tq, tk, window)
        p = p_buf[: bh * n * (nk - k0)].view(bh, n, nk - k0)  # probabilities
        for i in range(b):  # the tile (h, n, nk) is shared by the batch: one GEMM per batch row
            rows_i = slice(i * h, (i + 1) * h)
            torch.baddbmm(tile, qb[rows_i], k_blk[rows_i].transpose(1, 2), beta=LOG2E, out=p[rows_i])
        p.exp2_()  # exp2(log2(e) (q k^T + tile - lse)) = exp(q k^T + tile - lse)
        dv[:, k0:nk].baddbmm_(p.transpose(1, 2), dob[:, :, :hv])
        ds = torch.bmm(dob, v_blk.transpose(1, 2), out=ds_buf[: p.numel()].view(p.shape)).mul_(p)  # dS = P (dP - delta)
        dq[:, r0 : r0 + n] = torch.bmm(ds, k_blk[:, :, :hd])  # (dynamo refuses a non-contiguous out=)
        dk[:, k0:nk].baddbmm_(ds.transpose(1, 2), qb[:, :, :hd])
        if acc is not None:
            dtile = _batch_sum(ds.reshape(b, h, n, nk - k0))  # (H, n, nk - k0): the bias is shared by the batch
            if tile.shape[0] == 1:  # one bias for every head
                dtile = dtile.sum(0, keepdim=True)
            if k0:  # the keys the window skipped: no gradient
                dtile = torch.nn.functional.pad(dtile, (k0, 0))
            source.backward(r0, n, nk, dtile, saved_tile, acc)
    # the scores were (q * scale) k^T: dq takes the scale; dk came from q * scale * log2(e)
    dq = dq.reshape(b, h, tq, hd).index_select(2, rev).mul_(1.0 / math.sqrt(hd))
    dk.mul_(1.0 / LOG2E)
    grads = source.grads(acc) if acc is not None else None
    return (dq.to(dout.dtype), dk.reshape(b, h, tk, hd).to(dout.dtype), dv.reshape(b, h, tk, hv).to(dout.dtype), grads)


class BlockedBiasAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(hd) + bias) v, causal (bottom-right aligned), by query blocks.
    ``inputs``: the tensors the source's tiles depend on (their gradients); ``window``: the keys a
    query sees (None: every earlier key)."""

    @staticmethod
    def forward(ctx, q, k, v, source, rows, window, *inputs):
        with torch.autocast(q.device.type, enabled=False):  # scores stay float32 under autocast
            out, saved = blocked_forward(q, k, v, source, rows, window)
        ctx.source, ctx.rows, ctx.window, ctx.n_inputs = source, rows, window, len(inputs)
        ctx.save_for_backward(*saved)
        return out

    @staticmethod
    def backward(ctx, dout):
        want = bool(ctx.n_inputs) and any(ctx.needs_input_grad[6:])
        with torch.autocast(dout.device.type, enabled=False):
            dq, dk, dv, grads = blocked_backward(dout, ctx.saved_tensors, ctx.source, ctx.rows, ctx.window, want)
        return (dq, dk, dv, None, None, None, *(grads if want else (None,) * ctx.n_inputs))


def _batch_sum(ds: torch.Tensor) -> torch.Tensor:
    """(B, H, n, nk) -> (H, n, nk), the sum over the batch, added into ``ds[0]`` (the caller reads
    ds no more; a new tensor per block would touch fresh pages): faster than ``ds.sum(0)`` on a CPU."""
    out = ds[0]
    for i in range(1, ds.shape[0]):
        out.add_(ds[i])
    return out


def blocked_bias_attention(
    q, k, v, source, inputs: tuple = (), rows: int = BLOCK_ROWS, window: int | None = None
) -> torch.Tensor:
    """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd), with the bias tiles of ``source``
    (``tiles.py``, ``piecewise.py``) and ``inputs`` the tensors those tiles depend on; ``window``:
    the keys each query sees. Without autograd (a prefill, an evaluation) it runs ``forward_only``."""
    window, train = call_kind(k, window, (q, k, v, *inputs))
    if not train:
        with torch.autocast(q.device.type, enabled=False):
            return forward_only(q, k, v, source, rows, window)
    return BlockedBiasAttention.apply(q, k, v, source, rows, window, *inputs)


def forward_only(q, k, v, source, rows: int, window: int | None = None) -> torch.Tensor:
    """The blocked forward with nothing kept for backward (a prefill, an evaluation). On a CPU each
    block is ``block_softmax``'s flash op; elsewhere one batch row at a time, so the scores
    (H, n, nk) stay in cache through ``baddbmm`` (bias and scores in one pass) and one softmax."""
    b, h, tq, hd = q.shape
    tk = k.shape[-2]
    cdt = compute_dtype(q.dtype)
    qs = q.to(cdt) * (1.0 / math.sqrt(hd))  # (B, H, Tq, hd)
    kc, vc = k.to(cdt), v.to(cdt)  # (B, H, Tk, hd)
    flash = flash_here(q.device)
    out = torch.empty(b, h, tq, v.shape[-1], dtype=cdt, device=q.device)
    for r0 in range(0, tq, rows):
        n = min(rows, tq - r0)
        nk = r0 + n + tk - tq
        k0 = window_start(r0, tq, tk, window)
        tile = window_tile(source.tile(r0, n, nk), r0, n, nk, tq, tk, window)  # (h, n, nk - k0), rows reversed
        qb = qs[:, :, r0 : r0 + n].flip(-2)  # (B, H, n, hd)
        if flash:
            out[:, :, r0 : r0 + n] = block_softmax(qb, kc[:, :, k0:nk], vc[:, :, k0:nk], tile)[0].flip(-2)
            continue
        for i in range(b):
            s = torch.baddbmm(tile, qb[i], kc[i, :, k0:nk].transpose(-1, -2))  # (H, n, nk - k0): bias + scores
            out[i, :, r0 : r0 + n] = torch.bmm(torch.softmax(s, -1), vc[i, :, k0:nk]).flip(-2)
    return out.to(v.dtype)

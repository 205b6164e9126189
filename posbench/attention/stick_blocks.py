"""Stick-breaking attention by blocks of keys (the fast path of methods/stickbreaking.py).

With z_ij = q_i . k_j / sqrt(hd), the weights are A_ij = exp(a_ij) where

    a_ij = logsigmoid(z_ij) + sum_{k>j, visible} logsigmoid(-z_ik) = z_ij + S_ij,
    S_ij = sum_{k>=j, visible} logsigmoid(-z_ik)      (logsigmoid(z) = z + logsigmoid(-z))

Keys are taken in blocks of ``block`` columns from the nearest to the oldest. Within a block the
keys are reversed (nearest first), so S is one forward cumulative sum over the block plus a carry
per row: the sum over every visible key to the block's right. After the last block the carry is
log of the stick's rest, prod_j (1 - beta_ij). The rest is matmuls: q k^T and A v per block.
``StickBlocks`` has its own backward, which recomputes each block's weights, so memory is
O(L x block) in training too (autograd would keep every block's tiles); no L x L mask is built. Only rows whose causal edge (or window
edge) crosses a block get a mask, as -inf scores: logsigmoid(inf) = 0 adds nothing to S and
exp2(-inf) = 0. The weights are taken by ``exp2`` of a log2 (``exp`` of values that underflow to
subnormals runs 10-30x slower on some CPUs, issue 68).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posbench.core.masked import windowed

LOG2E = 1.0 / math.log(2.0)


def stick_breaking_blocks(q, k, v, window=None, attend_current=False, block=128) -> tuple[torch.Tensor, torch.Tensor]:
    """(o, rest) for q (B, H, Tq, hd), k (B, H, Tk, hd), v (B, H, Tk, dv), bottom-right aligned
    (query i at key index i + Tk - Tq): o (B, H, Tq, dv) = sum_j A_ij v_j, rest (B, H, Tq) the
    stick's remainder 1 - sum_j A_ij; both in q's dtype. Keys j < i (j <= i with
    ``attend_current``), within the last ``window`` key indices when a window is given."""
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    win = window if windowed(k.shape[-2], window) else None
    o, rest = StickBlocks.apply(q.to(cdt), k.to(cdt), v.to(cdt), (win, attend_current, block))
    return o.to(q.dtype), rest.to(q.dtype)


class StickBlocks(torch.autograd.Function):
    """The blocks forward and their own backward. The forward keeps o, rest and the carry each
    block started from ((L / block) x Tq numbers per head), nothing of a block itself: the backward
    recomputes each block's weights exactly as the forward did, oldest block first. With go, gr
    the gradients of o and rest and da_ij = A_ij (go_i . v_j):
    dz_ij = da_ij - sigmoid(z_ij) (sum_{k<=j} da_ik + gr_i rest_i), the sum over keys as old as j
    or older, a cumulative sum from the oldest key carried across blocks (from the oldest side,
    so no large total is cancelled). Memory O(L x block) in the backward too."""

    @staticmethod
    def forward(ctx, q, k, v, how):
        win, attend_current, block = how
        qs = q * q.shape[-1] ** -0.5
        out = q.new_zeros(*q.shape[:-1], v.shape[-1])  # (B, H, Tq, dv)
        carry = q.new_zeros(q.shape[:-1])  # (B, H, Tq): sum of logsigmoid(-z) right of the block
        starts = []  # the carry each block starts from, nearest block first
        for cols in _blocks(k.shape[-2], block):
            starts.append(carry.clone())
            for kr, vr, r0, r1, mask in _tiles(k, v, cols, q.shape[-2], win, attend_current):
                _, s, weights = _weights(qs[..., r0:r1, :], kr, carry[..., r0:r1], mask)
                out[..., r0:r1, :] += weights @ vr
                carry[..., r0:r1] = s[..., -1]  # rows are disjoint within a block
        rest = carry.exp()
        ctx.save_for_backward(q, k, v, rest, *starts)
        ctx.how = how
        return out, rest

    @staticmethod
    def backward(ctx, go, gr):
        q, k, v, rest, *starts = ctx.saved_tensors
        win, attend_current, block = ctx.how
        scale = q.shape[-1] ** -0.5
        qs = q * scale
        go = go.contiguous()
        d_rest = gr * rest  # (B, H, Tq): the gradient of the last carry
        older = q.new_zeros(q.shape[:-1])  # (B, H, Tq): sum of da over the keys left of the block
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for cols, carry in reversed(list(zip(_blocks(k.shape[-2], block), starts))):
            for kr, vr, r0, r1, mask in _tiles(k, v, cols, q.shape[-2], win, attend_current):
                z, _, weights = _weights(qs[..., r0:r1, :], kr, carry[..., r0:r1], mask)
                g = go[..., r0:r1, :]
                da = weights * (g @ vr.transpose(-1, -2))  # (B, H, rows, n), nearest key first
                upto = da.flip(-1).cumsum(-1).flip(-1) + older[..., r0:r1, None]  # keys as old as j or older
                dz = da - torch.sigmoid(z) * (upto + d_rest[..., r0:r1, None])
                dq[..., r0:r1, :] += dz @ kr
                dk[..., cols, :] += (dz.transpose(-1, -2) @ qs[..., r0:r1, :]).flip(-2)
                dv[..., cols, :] += (weights.transpose(-1, -2) @ g).flip(-2)
                older[..., r0:r1] = upto[..., 0]
        return dq * scale, dk, dv, None


def _blocks(tk: int, block: int) -> list[slice]:
    """The key blocks, nearest first: slices of ``block`` keys from the end, the oldest shorter."""
    return [slice(max(0, c1 - block), c1) for c1 in range(tk, 0, -block)]


def _tiles(k, v, cols: slice, tq: int, win: int | None, attend_current: bool):
    """(key block reversed, value block reversed, r0, r1, mask or None) for each run of query
    rows that sees the keys ``cols`` (``_segments``)."""
    tk, c0, c1 = k.shape[-2], cols.start, cols.stop
    kr, vr = k[..., cols, :].flip(-2), v[..., cols, :].flip(-2)  # nearest key first
    for r0, r1, masked in _segments(tq, tk, c0, c1, win, attend_current):
        mask = _visible(range(r0, r1), range(c0, c1), tk - tq, win, attend_current, k.device) if masked else None
        yield kr, vr, r0, r1, mask


def _weights(q, kr, carry, mask):
    """One block for some query rows: (z, S, A) with z = q kr^T (q already scaled, -inf where
    ``mask`` (rows, n) is False), S = cumsum(logsigmoid(-z)) + carry, A = exp(z + S)."""
    z = q @ kr.transpose(-1, -2)  # (B, H, rows, n)
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    s = F.logsigmoid(-z).cumsum(-1).add_(carry[..., None])
    return z, s, torch.exp2((z + s).mul_(LOG2E))


def _segments(tq: int, tk: int, c0: int, c1: int, win: int | None, attend_current: bool):
    """The query rows that see keys c0..c1-1, as (r0, r1, masked) runs: rows whose causal or
    window edge falls inside the block are masked, the others see the whole block."""
    off, strict = tk - tq, 0 if attend_current else 1
    r0 = max(0, c0 - off + strict)  # the first row that sees key c0
    r1 = tq if win is None else min(tq, c1 - 1 - off + win)  # past the last row that sees key c1 - 1
    if r0 >= r1:
        return []
    a = min(max(c1 - 1 - off + strict, r0), r1)  # from here every row sees key c1 - 1
    b = r1 if win is None else min(max(c0 - off + win, a), r1)  # from here rows lose key c0
    runs = [(r0, a, True), (a, b, False), (b, r1, True)]
    return [run for run in runs if run[0] < run[1]]


def _visible(rows: range, cols: range, off: int, win: int | None, attend_current: bool, device) -> torch.Tensor:
    """(rows, n) bool: column t (key cols[-1] - t, nearest first) visible to row r (key index r + off)."""
    i = torch.arange(rows.start, rows.stop, device=device)[:, None] + off
    j = cols.stop - 1 - torch.arange(len(cols), device=device)[None, :]
    seen = j <= i if attend_current else j < i
    if win is not None:
        seen = seen & (j > i - win)
    return seen

"""Stick-breaking attention by blocks of keys (the fast path of methods/stickbreaking.py).

With z_ij = q_i . k_j / sqrt(hd), the weights are A_ij = exp(a_ij) where

    a_ij = logsigmoid(z_ij) + sum_{k>j, visible} logsigmoid(-z_ik) = z_ij + S_ij,
    S_ij = sum_{k>=j, visible} logsigmoid(-z_ik)      (logsigmoid(z) = z + logsigmoid(-z))

Keys are taken in blocks of ``block`` columns from the nearest to the oldest. Within a block the
keys are reversed (nearest first), so S is one forward cumulative sum over the block plus a carry
per row: the sum over every visible key to the block's right. After the last block the carry is
log of the stick's rest, prod_j (1 - beta_ij). The rest is matmuls: q k^T and A v per block.
Memory per block is O(L x block); no L x L mask is built. Only rows whose causal edge (or window
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
    tq, tk = q.shape[-2], k.shape[-2]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qs = q.to(cdt) * q.shape[-1] ** -0.5
    k, v = k.to(cdt), v.to(cdt)
    win = window if windowed(tk, window) else None
    out = qs.new_zeros(*q.shape[:-1], v.shape[-1])  # (B, H, Tq, dv)
    carry = qs.new_zeros(q.shape[:-1])  # (B, H, Tq): sum of logsigmoid(-z) right of the block
    for c1 in range(tk, 0, -block):
        c0 = max(0, c1 - block)
        kr, vr = k[..., c0:c1, :].flip(-2), v[..., c0:c1, :].flip(-2)  # nearest key first
        step = qs.new_zeros(q.shape[:-1])
        for r0, r1, masked in _segments(tq, tk, c0, c1, win, attend_current):
            mask = _visible(range(r0, r1), range(c0, c1), tk - tq, win, attend_current, q.device) if masked else None
            o_seg, total = _tile(qs[..., r0:r1, :], kr, vr, carry[..., r0:r1], mask)
            out = out + F.pad(o_seg, (0, 0, r0, tq - r1))
            step = step + F.pad(total, (r0, tq - r1))
        carry = carry + step
    return out.to(q.dtype), carry.exp().to(q.dtype)


def _tile(q, kr, vr, carry, mask):
    """One block for some query rows: (A vr, sum over the block of logsigmoid(-z)) with z = q kr^T
    (q already scaled), A = exp(z + cumsum(logsigmoid(-z)) + carry); ``mask`` (rows, n) bool."""
    z = q @ kr.transpose(-1, -2)  # (B, H, rows, n)
    if mask is not None:
        z = z.masked_fill(~mask, float("-inf"))
    s = F.logsigmoid(-z).cumsum(-1)  # (B, H, rows, n): S without the carry
    weights = torch.exp2((z + s + carry[..., None]) * LOG2E)
    return weights @ vr, s[..., -1]


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

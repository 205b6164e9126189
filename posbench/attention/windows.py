"""Causal sliding-window attention by query blocks: each block of ``rows`` queries attends to the
keys its window can reach (``rows + window - 1`` of them at most) through one SDPA call with a
band mask, never an (L, L) mask. Where the window is much shorter than L the work falls from
L x L to L x (rows + window); the arithmetic per query is SDPA's over the same keys, so the result
equals the masked reference (``posbench.core.masked.causal_attention`` with ``window``).

Causality is bottom-right aligned, as everywhere: query row i (of Tq) sits at key index
i + Tk - Tq and sees the keys in (that index - window, that index].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

WINDOW_ROWS = 256  # query rows per block (the prototype of issue 68: 256-row blocks)


def by_blocks(tq: int, tk: int, window: int | None, rows: int = WINDOW_ROWS) -> bool:
    """Whether ``window_attention`` saves work: a window, and more than one block of queries
    whose keys reach past the window (a decode step or a short input keeps the one masked call)."""
    return window is not None and tq > rows and tk > window + rows


def band_mask(first_query: int, n: int, first_key: int, nk: int, window: int, device) -> torch.Tensor:
    """(n, nk) bool: True where key ``first_key + j`` lies in the window of the query at key
    index ``first_query + i``."""
    a = torch.arange(first_query, first_query + n, device=device)[:, None]
    j = torch.arange(first_key, first_key + nk, device=device)[None, :]
    return (j <= a) & (j > a - window)


def window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, rows: int = WINDOW_ROWS) -> torch.Tensor:
    """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd): softmax(q k^T / sqrt(hd)) v over
    each query's last ``window`` keys, by blocks of ``rows`` queries (differentiable: autograd
    through each block's SDPA call)."""
    tq, tk = q.shape[-2], k.shape[-2]
    offset = tk - tq  # key index of query row 0
    outs = []
    masks: dict[tuple, torch.Tensor] = {}  # every full block away from key 0 has the same band
    for r0 in range(0, tq, rows):
        n = min(rows, tq - r0)
        first = r0 + offset  # key index of the block's first query
        lo, hi = max(0, first - window + 1), first + n  # the keys the block may see: lo .. hi - 1
        key = (n, hi - lo, first - lo)
        if key not in masks:
            masks[key] = band_mask(first - lo, n, 0, hi - lo, window, q.device)
        outs.append(F.scaled_dot_product_attention(q[:, :, r0 : r0 + n], k[:, :, lo:hi], v[:, :, lo:hi], attn_mask=masks[key]))
    return torch.cat(outs, dim=-2)

"""Attention through accumulated Householder transforms (PaTH's scores), exact by a scan and fast
by the chunked UT transform.

Every key position t carries a transform H_t = I - beta_t w_t w_t^T (w_t a unit vector, beta_t in
[0, 2]); a key reaches a later query through the transforms of the tokens between them:

    score_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j        (j <= i; j = i: q_i . k_i)

``path_scores`` is the reference: a scan over key positions, plain and exact, O(Tk) Python steps.
``path_attention`` is the algorithm of the PaTH paper (Yang et al. 2025, section 3.2) and of
flash-linear-attention's ``fla/ops/path_attn`` (fla-org/flash-linear-attention, commit 27289fc):

- within a chunk of C positions the product H_s H_{s+1} ... H_e is I - W^T T W, the UT transform,
  T = A^{-1} diag(beta), A = I + diag(beta) striu(W W^T) unit upper triangular (one triangular
  solve per chunk); its leading and trailing principal blocks are the transforms of the chunk's
  prefixes and suffixes, so the chunk's own scores, its queries carried back to its start and its
  keys carried to its end are matmuls with masked (C, C) matrices;
- across chunks, query chunk a meets key chunk b = a - g at gap g: the queries, carried back one
  chunk per gap by the chunk's (d, d) transform, meet the keys carried to their chunk's end. One
  batched matmul per gap for every chunk pair at that gap: O(Tk / C) Python steps, no L x L write.

The softmax runs over the gaps' (C, C) blocks (only the causal half of the scores is ever formed)
with a row maximum taken first, so memory is the causal scores' half once, kept for the gradient.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

LOG2E = 1.4426950408889634  # scores in log2 units, so the softmax takes exp2
FLA_MISSING = "needs CUDA and fla-core (pip install posbench[fla])"
FLA_HEAD_DIMS = (16, 32, 64)  # what fla's parallel_path_attention takes


@functools.cache
def _fla_import():
    """flash-linear-attention's ``parallel_path_attention``, or None without fla-core."""
    try:
        from fla.ops.path_attn.parallel import parallel_path_attention
    except ImportError:
        return None
    return parallel_path_attention


def fla_kernel(device):
    """fla's PaTH kernel for tensors on ``device`` (CUDA, fla-core installed), or None. It takes
    q (B, T, HQ, D), k, v, w (B, T, H, D), beta (B, T, H), g = log f (B, T, HQ) (its own cumulative
    sum) and ``scale``, returns (o (B, T, HQ, D), a key cache), and scales the gate with the scores."""
    return _fla_import() if torch.device(device).type == "cuda" else None


def path_scores(q, k, w, beta) -> torch.Tensor:
    """(B, H, Tq, Tk) q_i^T H_i ... H_{j+1} k_j, unmasked where j > i, for q (B, H, Tq, d), k and w
    (B, H, Tk, d), beta (B, H, Tk): the reference scan. Query i sits at key index i + Tk - Tq."""
    tq, tk = q.shape[-2], k.shape[-2]
    at = torch.arange(tq, device=q.device) + tk - tq  # (Tq,) each query's key index
    carried = q  # carried[i] = H_{t+1} ... H_i q_i: query i carried back to position t
    cols = []
    for t in range(tk - 1, -1, -1):
        cols.append((carried * k[..., t, None, :]).sum(-1))  # (B, H, Tq): column t
        wt = w[..., t, None, :]  # (B, H, 1, d)
        moved = carried - beta[..., t, None, None] * (carried * wt).sum(-1, keepdim=True) * wt  # H_t q
        carried = torch.where((at >= t)[:, None], moved, carried)  # H_t acts on the queries at or after t
    return torch.stack(cols[::-1], -1)


def path_attention(q, k, v, householders, gate=None, window: int | None = None, chunk: int = 64) -> torch.Tensor:
    """softmax_j(score_ij + F_i - F_j) v_j over the keys j <= i (and i - j < ``window``), for q
    (B, H, Tq, d) at the last Tq of the Tk keys k, ``householders`` = (w (B, H, Tk, d), beta
    (B, H, Tk)), v (B, H, Tk, dv), ``gate`` F (B, H, Tk) or None; float32 or float64 in, the same
    out. The scores are ``path_scores``'s (scale q beforehand); ``chunk`` positions per chunk."""
    with torch.autocast(q.device.type, enabled=False):  # every product in q's dtype, as the scan's
        return _chunked(q, k, v, householders, gate, window, chunk)


def _chunks(x, n, c, front=0):
    """(B, H, T, ...) -> (n, B, H, C, ...) contiguous, ``front`` zeros before and zeros after.
    Chunk-major: a run of chunks is a contiguous slice, so each gap's batched matmuls view it as
    (chunks x B x H) matrices instead of copying it (as a slice of (B, H, n, ...) must be)."""
    b, h, t = x.shape[:3]
    pad = [0, 0] * (x.dim() - 3) + [front, n * c - t - front]
    return F.pad(x, pad).view(b, h, n, c, *x.shape[3:]).movedim(2, 0).contiguous()


def _ut(w, beta):
    """T = A^{-1} diag(beta) (n, B, H, C, C), upper triangular: H_s ... H_e = I - W^T T W per chunk."""
    c = w.shape[-2]
    eye = torch.eye(c, dtype=w.dtype, device=w.device)
    a = eye + beta[..., :, None] * (w @ w.mT).triu(1)  # unit upper triangular
    return torch.linalg.solve_triangular(a, torch.diag_embed(beta), upper=True, unitriangular=True)


def _chunked(q, k, v, householders, gate, window, c):
    w, beta = householders
    b, h, tq, d = q.shape
    tk = k.shape[-2]
    n = -(-tk // c)
    first = tk - tq  # the key index of query 0
    a0 = first // c  # the first chunk holding a query
    # keys: padded at the end with beta 0 (H = I) and k 0, behind every real query (causally masked)
    kc, wc, vc, bc = (_chunks(x, n, c) for x in (k, w, v, beta))  # (n, B, H, C, ...)
    qc = _chunks(q, n - a0, c, front=first - a0 * c)  # (nq, B, H, C, d): query chunks a0 .. n-1
    t = _ut(wc, bc)
    wk = (wc @ kc.mT).tril(-1)  # (n, B, H, C, C) w_t . k_j for t > j
    k_end = kc - (wk.mT @ t) @ wc  # each key carried to its chunk's end: H_e ... H_{j+1} k_j
    carry = torch.eye(d, dtype=q.dtype, device=q.device) - wc.mT @ (t.mT @ wc)  # (n, B, H, d, d): x @ G_b^T
    wq, tq_, wkq = wc[a0:], t[a0:], wk[a0:]
    qw_t = (qc @ wq.mT).tril() @ tq_.mT  # q_i . w_t for t <= i, through T^T
    q_start = qc - qw_t @ wq  # each query carried back to its chunk's start: H_s ... H_i q_i
    own = qc @ kc[a0:].mT - qw_t @ wkq  # (nq, B, H, C, C): the chunk's own scores

    li = torch.arange(c, device=q.device)
    dist = li[:, None] - li[None, :]  # (C, C) i - j within a chunk pair, plus g C at gap g
    # F_i is the same for every key of row i and cancels in the softmax: each row takes F at its
    # chunk's start instead, R_a - F_j, a (1, C) row per block and close to F_i - F_j in rounding
    f2 = _chunks(gate, n, c) * LOG2E if gate is not None else None  # (n, B, H, C) in log2 units

    def masked(scores, lo, g, keys):
        """A gap's block in log2 units with R_a - F_j added and the causal / window mask as -inf."""
        if f2 is not None:
            scores = scores + (f2[a0 + lo :, ..., :1, None] - f2[keys][..., None, :])
        causal, windowed = g == 0 and c > 1, window is not None and g * c + c - 1 >= window
        if not (causal or windowed):
            return scores
        hide = dist < 0 if causal else torch.zeros_like(dist, dtype=torch.bool)
        if windowed:
            hide = hide | (dist + g * c >= window)
        return scores.masked_fill(hide, float("-inf"))

    blocks = [(0, 0, masked(own * LOG2E, 0, 0, slice(a0, n)))]  # (first query chunk, gap, scores)
    carried, lo = q_start * LOG2E, 0
    for g in range(1, n):
        if window is not None and (g - 1) * c + 1 >= window:
            break  # every key at this gap (and beyond) is out of the window
        new_lo = max(0, g - a0)  # query chunks before it have no key chunk g back
        carried, lo = carried[new_lo - lo :], new_lo
        keys = slice(a0 + lo - g, n - g)
        blocks.append((lo, g, masked(carried @ k_end[keys].mT, lo, g, keys)))
        if g + 1 < n:
            carried = carried @ carry[keys]  # on back through key chunk a - g

    with torch.no_grad():  # the softmax's row maximum, a constant for its gradient
        top = blocks[0][2].amax(-1, keepdim=True)  # (nq, B, H, C, 1)
        for lo, _, s in blocks[1:]:
            top[lo:] = torch.maximum(top[lo:], s.amax(-1, keepdim=True))
    # a ones column on v: each product gives the row's share of the softmax's sum beside its values
    ones = torch.ones_like(vc[..., :1])
    vx = torch.cat([vc, ones], -1)  # (n, B, H, C, dv + 1)
    acc = 0
    for lo, g, s in blocks:
        # exp2 of log2-unit scores: exp's slow path on underflowing values costs 10x on some CPUs
        part = torch.exp2(s - top[lo:]) @ vx[a0 + lo - g : n - g]
        acc = acc + (F.pad(part, (0, 0) * 4 + (lo, 0)) if lo else part)  # the first lo query chunks: none g back
    o = (acc[..., :-1] / acc[..., -1:]).movedim(0, 2).flatten(2, 3)  # (B, H, nq C, dv)
    return o[:, :, first - a0 * c :][:, :, :tq]

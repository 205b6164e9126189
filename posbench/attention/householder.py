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
with a row maximum taken first, so memory is the causal scores' half once, kept for the gradient;
that loop is one autograd node (``GapSoftmax``) with its own backward.
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
    own = own * LOG2E
    if f2 is not None:
        own = own + (f2[a0:, ..., :1, None] - f2[a0:, ..., None, :])
    hide = _hidden(dist, 0, window)
    if hide is not None:
        own = own.masked_fill(hide, float("-inf"))
    # a ones column on v: each product gives the row's share of the softmax's sum beside its values
    vx = torch.cat([vc, torch.ones_like(vc[..., :1])], -1)  # (n, B, H, C, dv + 1)
    gaps = _Gaps(a0, n, c, window, dist)
    acc = GapSoftmax.apply(own, q_start * LOG2E, k_end, carry, vx, f2, gaps)  # (nq, B, H, C, dv + 1)
    o = (acc[..., :-1] / acc[..., -1:]).movedim(0, 2).flatten(2, 3)  # (B, H, nq C, dv)
    return o[:, :, first - a0 * c :][:, :, :tq]


def _hidden(dist, g: int, window: int | None) -> torch.Tensor | None:
    """The (C, C) mask of a gap-g block's hidden pairs (future keys at gap 0, keys out of the
    window), or None where every pair is seen; ``dist`` is i - j within the chunk pair."""
    c = dist.shape[0]
    causal, windowed = g == 0 and c > 1, window is not None and g * c + c - 1 >= window
    if not (causal or windowed):
        return None
    hide = dist < 0 if causal else torch.zeros_like(dist, dtype=torch.bool)
    return hide | (dist + g * c >= window) if windowed else hide


class _Gaps:
    """What ``GapSoftmax`` needs of the chunking: the first query chunk ``a0``, ``n`` key chunks
    of ``c``, the window, the (C, C) i - j, and ``plan``: per gap g >= 1 taken, (g, lo, keys) with
    lo the first query chunk (of the nq) that has a key chunk g back, keys those key chunks."""

    def __init__(self, a0: int, n: int, c: int, window: int | None, dist: torch.Tensor):
        self.a0, self.n, self.c, self.window, self.dist = a0, n, c, window, dist
        self.plan = []
        for g in range(1, n):
            if window is not None and (g - 1) * c + 1 >= window:
                break  # every key at this gap (and beyond) is out of the window
            lo = max(0, g - a0)  # query chunks before it have no key chunk g back
            self.plan.append((g, lo, slice(a0 + lo - g, n - g)))


class GapSoftmax(torch.autograd.Function):
    """The softmax and values over the gaps' (C, C) blocks, its backward by hand.

    In: ``own`` (nq, B, H, C, C) the gap-0 scores in log2 units (gate and mask in), ``carried``
    (nq, B, H, C, d) the queries at their chunk's start (log2 units), ``k_end`` (n, B, H, C, d),
    ``carry`` (n, B, H, d, d) each chunk's transform (x @ carry), ``vx`` (n, B, H, C, dv + 1) the
    values with a ones column, ``f2`` (n, B, H, C) the gate in log2 units or None. Out: acc
    (nq, B, H, C, dv + 1), sum_j exp2(s_ij - max_i) [v_j, 1] per query row.

    Why by hand: autograd through the gap loop turned each gap's slices of ``carried``, ``k_end``,
    ``carry`` and ``vx`` into a full-size zero tensor plus a copy and an add per slice in the
    backward (``SliceBackward``), and kept a masked_fill and an exp2 backward per block; this
    backward adds each gap's gradient into one buffer per input in place, and a hidden pair's
    weight is already 0 (exp2(-inf)), so its gradient is too with no mask. The forward's
    operations and their order are autograd's were (the same bits).
    """

    @staticmethod
    def forward(ctx, own, carried, k_end, carry, vx, f2, gaps: _Gaps):  # noqa: PLR0913 (the loop's tensors)
        a0, n = gaps.a0, gaps.n
        blocks, inputs = [(0, own)], [carried]  # (first query chunk, scores); each gap's carried queries
        lo = 0
        for i, (g, new_lo, keys) in enumerate(gaps.plan):
            carried, lo = carried[new_lo - lo :], new_lo
            inputs.append(carried)
            s = carried @ k_end[keys].mT  # (m, B, H, C, C) log2 units
            if f2 is not None:
                s = s + (f2[a0 + lo :, ..., :1, None] - f2[keys][..., None, :])
            hide = _hidden(gaps.dist, g, gaps.window)
            if hide is not None:
                s = s.masked_fill(hide, float("-inf"))
            blocks.append((lo, s))
            if i + 1 < len(gaps.plan):
                carried = carried @ carry[keys]  # on back through key chunk a - g
        top = blocks[0][1].amax(-1, keepdim=True)  # (nq, B, H, C, 1): the softmax's row maximum
        for lo, s in blocks[1:]:
            top[lo:] = torch.maximum(top[lo:], s.amax(-1, keepdim=True))
        probs, acc = [], None
        for (lo, s), keys in zip(blocks, [slice(a0, n)] + [keys for _, _, keys in gaps.plan]):
            # exp2 of log2-unit scores: exp's slow path on underflowing values costs 10x on some CPUs
            p = torch.exp2(s - top[lo:])
            probs.append(p)
            part = p @ vx[keys]
            if acc is None:
                acc = part
            else:
                acc[lo:] += part  # the first lo query chunks: none g back
        ctx.gaps, ctx.probs, ctx.inputs = gaps, probs, inputs
        ctx.save_for_backward(k_end, carry, vx, f2)
        return acc

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, dacc):
        k_end, carry, vx, f2 = ctx.saved_tensors
        gaps, probs, inputs = ctx.gaps, ctx.probs, ctx.inputs
        a0, n, ln2 = gaps.a0, gaps.n, 0.6931471805599453  # d exp2(x) / dx = ln 2 exp2(x)
        d_kend, d_carry, d_vx = torch.zeros_like(k_end), torch.zeros_like(carry), torch.zeros_like(vx)
        d_f2 = None if f2 is None else torch.zeros_like(f2)
        d_next = None  # the gradient of the next gap's carried queries (rows from its lo on)
        for i in range(len(gaps.plan) - 1, -1, -1):
            g, lo, keys = gaps.plan[i]
            p, carried, da = probs[i + 1], inputs[i + 1], dacc[lo:]
            _add_product(d_vx[keys], p.mT, da)
            ds = (da @ vx[keys].mT).mul_(p).mul_(ln2)  # (m, B, H, C, C): hidden pairs have p = 0
            if d_f2 is not None:
                d_f2[a0 + lo :, ..., 0] += ds.sum((-2, -1))
                d_f2[keys] -= ds.sum(-2)
            _add_product(d_kend[keys], ds.mT, carried)
            d_carried = ds @ k_end[keys]
            if d_next is not None:  # this gap's carried @ carry[keys] fed the next gap from row shift on
                shift = d_carried.shape[0] - d_next.shape[0]
                _add_product(d_carried[shift:], d_next, carry[keys][shift:].mT)
                _add_product(d_carry[keys][shift:], carried[shift:].mT, d_next)
            d_next = d_carried
        p0 = probs[0]
        _add_product(d_vx[a0:n], p0.mT, dacc)
        d_own = (dacc @ vx[a0:n].mT).mul_(p0).mul_(ln2)
        d_first = torch.zeros_like(inputs[0])
        if d_next is not None:
            d_first[d_first.shape[0] - d_next.shape[0] :] = d_next
        return d_own, d_first, d_kend, d_carry, d_vx, d_f2, None


def _add_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """out += a @ b in place, one GEMM with beta 1 and no temporary: out (..., r, c) contiguous
    (a run of chunk-major chunks), a (..., r, k) and b (..., k, c) with out's leading dims."""
    out.view(-1, *out.shape[-2:]).baddbmm_(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))

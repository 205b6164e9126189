"""Causal attention with an ALiBi bias computed inside one fused Triton kernel.

Same mathematics as the ``alibi`` method (Press, Smith, Lewis 2022, "Train Short, Test Long"):

    score_ij = (q_i . k_j) / sqrt(d) + slope_h * pos_scale * (j - i_abs),   i_abs = i + (Tk - Tq)

with the bias not scaled by 1/sqrt(d), and causality by index with bottom-right alignment (query
row i sees keys j <= i_abs). The kernels follow FlashAttention (Dao et al. 2022, Algorithm 1, and
the FlashAttention-2 loop order with the query block outermost): Q, K and V are read in tiles,
the softmax is computed online with running statistics m (row max) and l (row sum), and the bias
of a tile is formed in registers from the tile's row and column indices, so no (H, Tq, Tk) bias
tensor nor (Tq, Tk) score matrix ever exists in memory. Tiles wholly above the causal diagonal
are never visited. The backward pass recomputes the scores from the saved log-sum-exp, as in
FlashAttention: one kernel per key block for dK/dV and one per query block for dQ, so no atomics.

Bias, scores and softmax statistics are float32 whatever the input dtype; the forward and the
backward kernels build scores through the same ``@triton.jit`` helper, so they agree bit for bit.
The same kernels run with the bias switched off (``use_bias=False``), which is the benchmark's
baseline for what the bias itself costs.

On a machine without a GPU the kernels run on CPU tensors under ``TRITON_INTERPRET=1`` (Triton's
numpy interpreter, float32 and float16 only). The variable must be set before this module is
imported, because ``triton.jit`` decides at decoration time whether to compile or interpret.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

# True when this module's kernels were built by the interpreter (TRITON_INTERPRET=1 at import).
INTERPRETED = bool(triton.knobs.runtime.interpret)

HEAD_DIMS = (32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
BIAS_DTYPES = ("float32", "compute")
# exp2 is one instruction on the GPU; scores are carried in log2 units (natural units * LOG2E).
LOG2E = 1.4426950408889634


# ---------------------------------------------------------------------------------------------
# Kernels


@triton.jit
def _scores(
    qk,  # (BM, BN) float32, q . k
    offs_m_abs,  # (BM,) absolute query index i + (Tk - Tq)
    offs_n,  # (BN,) key index j
    seq_k,
    sm_scale,
    bias_slope,  # slope_h * pos_scale, float32 scalar
    round_like,  # a tile in the input dtype: BIAS_ROUND rounds the bias to its dtype
    USE_BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
):
    """Masked scores of one tile in log2 units, float32: (qk * sm_scale + bias) * log2(e).

    The single place where the bias is defined, shared by the forward and both backward kernels.
    """
    s = qk * sm_scale
    if USE_BIAS:
        # (j - i_abs) is exact in float32 up to 2^24 positions; the product is rounded once.
        dist = (offs_n[None, :] - offs_m_abs[:, None]).to(tl.float32)  # (BM, BN), <= 0 where visible
        bias = bias_slope * dist
        if BIAS_ROUND:
            # bias_dtype="compute": the bias as a kernel with input-dtype arithmetic would see it.
            bias = bias.to(round_like.dtype).to(tl.float32)
        s = s + bias
    visible = (offs_n[None, :] <= offs_m_abs[:, None]) & (offs_n[None, :] < seq_k)
    return tl.where(visible, s * 1.4426950408889634, float("-inf"))


@triton.jit
def _load_rows(base, offs_t, offs_d, stride_t, stride_d, n_rows):
    """(len(offs_t), D) tile of a (T, D) matrix; rows at or past n_rows read as 0."""
    mask = offs_t < n_rows
    return tl.load(base + offs_t[:, None] * stride_t + offs_d[None, :] * stride_d, mask=mask[:, None], other=0.0)


@triton.jit
def _key_block(
    q, k_base, v_base, offs_n, offs_d, skt, skd, svt, svd,
    offs_m_abs, seq_k, sm_scale, bias_slope,
    USE_BIAS: tl.constexpr, BIAS_ROUND: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    """Load one key/value block and score it against the resident query block: (k, v, s)."""
    k = _load_rows(k_base, offs_n, offs_d, skt, skd, seq_k)  # (BN, D)
    v = _load_rows(v_base, offs_n, offs_d, svt, svd, seq_k)  # (BN, D)
    qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BM, BN) float32
    s = _scores(qk, offs_m_abs, offs_n, seq_k, sm_scale, bias_slope, q, USE_BIAS, BIAS_ROUND)
    return k, v, s


@triton.jit
def _fwd_kernel(
    Q, K, V, Slopes, O, LSE,
    sqb, sqh, sqt, sqd,
    skb, skh, skt, skd,
    svb, svh, svt, svd,
    sob, soh, sot, sod,
    n_heads, seq_q, seq_k,
    sm_scale, pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program: BLOCK_M query rows of one (batch, head); loops over the visible key blocks."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offset = seq_k - seq_q  # bottom-right alignment: query row i sits at absolute position i + offset

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BM,)
    offs_m_abs = offs_m + offset
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BLOCK_N)
    mask_m = offs_m < seq_q
    q = _load_rows(Q + b * sqb + h * sqh, offs_m, offs_d, sqt, sqd, seq_q)  # (BM, D)
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    bias_slope = tl.load(Slopes + h).to(tl.float32) * pos_scale

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running row max (log2 units)
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running row sum of exp2(s - m_i)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)

    # Key blocks past the last row's diagonal are entirely masked: stop before them.
    hi = tl.minimum(seq_k, (pid_m + 1) * BLOCK_M + offset)
    for start_n in range(0, hi, BLOCK_N):
        k, v, s = _key_block(
            q, k_base, v_base, start_n + offs_n0, offs_d, skt, skd, svt, svd,
            offs_m_abs, seq_k, sm_scale, bias_slope, USE_BIAS, BIAS_ROUND, DOT_PRECISION,
        )
        # Every row sees key 0, so the first block already makes m_new finite (no -inf - -inf).
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])  # (BM, BN)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    acc = acc / l_i[:, None]
    o_ptrs = O + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :] * sod
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=mask_m[:, None])
    # log-sum-exp in log2 units, all the backward pass needs to rebuild the probabilities.
    tl.store(LSE + pid_bh * seq_q + offs_m, m_i + tl.math.log2(l_i), mask=mask_m)


@triton.jit
def _bwd_delta_kernel(
    O, DO, Delta,
    sob, soh, sot, sod,
    sdb, sdh, sdt, sdd,
    n_heads, seq_q,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
):
    """Delta_i = sum_d dO_id * O_id (float32): the row term of the softmax backward."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    o = _load_rows(O + b * sob + h * soh, offs_m, offs_d, sot, sod, seq_q)
    do = _load_rows(DO + b * sdb + h * sdh, offs_m, offs_d, sdt, sdd, seq_q)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(Delta + pid_bh * seq_q + offs_m, delta, mask=offs_m < seq_q)


@triton.jit
def _bwd_dkdv_kernel(
    Q, K, V, Slopes, DO, LSE, Delta, DK, DV,
    sqb, sqh, sqt, sqd,
    skb, skh, skt, skd,
    svb, svh, svt, svd,
    sdb, sdh, sdt, sdd,
    n_heads, seq_q, seq_k,
    sm_scale, pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program: dK, dV of BLOCK_N keys; loops over the query blocks that can see them.

    DK and DV are contiguous (B, H, Tk, D) buffers, whatever the layout of K and V.
    """
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offset = seq_k - seq_q

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # (BN,)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_m0 = tl.arange(0, BLOCK_M)
    mask_n = offs_n < seq_k
    k = _load_rows(K + b * skb + h * skh, offs_n, offs_d, skt, skd, seq_k)  # (BN, D)
    v = _load_rows(V + b * svb + h * svh, offs_n, offs_d, svt, svd, seq_k)
    q_base = Q + b * sqb + h * sqh
    do_base = DO + b * sdb + h * sdh
    bias_slope = tl.load(Slopes + h).to(tl.float32) * pos_scale

    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    # Query row i sees key j iff i + offset >= j: rows before the first key's diagonal are skipped.
    lo = tl.maximum(pid_n * BLOCK_N - offset, 0)
    lo = (lo // BLOCK_M) * BLOCK_M
    for start_m in range(lo, seq_q, BLOCK_M):
        offs_m = start_m + offs_m0
        mask_m = offs_m < seq_q
        q = _load_rows(q_base, offs_m, offs_d, sqt, sqd, seq_q)  # (BM, D)
        do = _load_rows(do_base, offs_m, offs_d, sdt, sdd, seq_q)
        # Padded rows (i >= Tq) get lse = +inf so their probabilities are exactly 0.
        lse = tl.load(LSE + pid_bh * seq_q + offs_m, mask=mask_m, other=float("inf"))
        delta = tl.load(Delta + pid_bh * seq_q + offs_m, mask=mask_m, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BM, BN)
        s = _scores(qk, offs_m + offset, offs_n, seq_k, sm_scale, bias_slope, q, USE_BIAS, BIAS_ROUND)
        p = tl.math.exp2(s - lse[:, None])  # (BM, BN) float32, the forward's probabilities
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=DOT_PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # (BM, BN)
        ds = p * (dp - delta[:, None])  # dScore; the bias is constant, so it has no gradient
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=DOT_PRECISION)

    dk = dk * sm_scale
    out = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DK + pid_bh * seq_k * HEAD_DIM + out, dk.to(DK.dtype.element_ty), mask=mask_n[:, None])
    tl.store(DV + pid_bh * seq_k * HEAD_DIM + out, dv.to(DV.dtype.element_ty), mask=mask_n[:, None])


@triton.jit
def _bwd_dq_kernel(
    Q, K, V, Slopes, DO, LSE, Delta, DQ,
    sqb, sqh, sqt, sqd,
    skb, skh, skt, skd,
    svb, svh, svt, svd,
    sdb, sdh, sdt, sdd,
    n_heads, seq_q, seq_k,
    sm_scale, pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    USE_BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One program: dQ of BLOCK_M query rows; loops over the same key blocks as the forward."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    offset = seq_k - seq_q

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BLOCK_N)
    mask_m = offs_m < seq_q
    q = _load_rows(Q + b * sqb + h * sqh, offs_m, offs_d, sqt, sqd, seq_q)  # (BM, D)
    do = _load_rows(DO + b * sdb + h * sdh, offs_m, offs_d, sdt, sdd, seq_q)
    lse = tl.load(LSE + pid_bh * seq_q + offs_m, mask=mask_m, other=float("inf"))
    delta = tl.load(Delta + pid_bh * seq_q + offs_m, mask=mask_m, other=0.0)
    k_base = K + b * skb + h * skh
    v_base = V + b * svb + h * svh
    bias_slope = tl.load(Slopes + h).to(tl.float32) * pos_scale

    dq = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    hi = tl.minimum(seq_k, (pid_m + 1) * BLOCK_M + offset)
    for start_n in range(0, hi, BLOCK_N):
        k, v, s = _key_block(
            q, k_base, v_base, start_n + offs_n0, offs_d, skt, skd, svt, svd,
            offs_m + offset, seq_k, sm_scale, bias_slope, USE_BIAS, BIAS_ROUND, DOT_PRECISION,
        )
        p = tl.math.exp2(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION)

    dq = dq * sm_scale
    out = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DQ + pid_bh * seq_q * HEAD_DIM + out, dq.to(DQ.dtype.element_ty), mask=mask_m[:, None])


# ---------------------------------------------------------------------------------------------
# Launch


def _check_inputs(q, k, v, slopes, bias_dtype: str) -> None:
    """Raise one-line errors for inputs the kernels cannot take."""
    name = "alibi_attention"
    for label, t in (("q", q), ("k", k), ("v", v), ("slopes", slopes)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
    for label, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name}: {label} must be (B, H, T, head_dim), got shape {tuple(t.shape)}")
    if q.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {q.dtype} not supported; use float16, bfloat16 or float32")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{name}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, tq, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"{name}: head_dim {d} not supported; use one of {', '.join(map(str, HEAD_DIMS))}")
    if k.shape != v.shape or k.shape[0] != b or k.shape[1] != h or k.shape[3] != d:
        raise ValueError(
            f"{name}: k and v must be (B, H, Tk, head_dim) = ({b}, {h}, Tk, {d}), "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    tk = k.shape[2]
    if tq < 1 or tq > tk:
        raise ValueError(f"{name}: need 1 <= query length <= key length, got Tq={tq}, Tk={tk}")
    if slopes.shape != (h,):
        raise ValueError(f"{name}: slopes must have shape ({h},) (one per head), got {tuple(slopes.shape)}")
    devices = {q.device, k.device, v.device, slopes.device}
    if len(devices) != 1:
        raise ValueError(f"{name}: q, k, v and slopes must be on one device, got {sorted(map(str, devices))}")
    if q.device.type == "cuda" and INTERPRETED:
        raise RuntimeError(f"{name}: CUDA tensors given but TRITON_INTERPRET=1 was set when the kernels were built")
    if q.device.type == "cpu" and not INTERPRETED:
        raise RuntimeError(f"{name}: CPU tensors need TRITON_INTERPRET=1 set before import; use a CUDA device")
    if q.device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"{name}: device {q.device} not supported; use a CUDA device")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError(f"{name}: bfloat16 is not supported by the Triton interpreter")
    if bias_dtype not in BIAS_DTYPES:
        raise ValueError(f"{name}: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")


def default_blocks(head_dim: int, dtype: torch.dtype, backward: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for this build.

    Under the interpreter every tile op is a numpy call, so small tiles give many cheap steps and
    exercise the multi-block paths at the short lengths the tests use. On the GPU the sizes keep
    the tiles of one program (q, k, v, dO, accumulators) within registers and shared memory at
    head_dim 128 in float32; they are reasonable starting points, not tuned per GPU.
    """
    if INTERPRETED:
        return 32, 32, 1, 1
    wide = head_dim == 128 or dtype == torch.float32
    if backward:
        return (32, 64, 4, 2) if wide else (64, 64, 4, 2)
    return (64, 64, 4, 2) if wide else (128, 64, 4, 3)


def _bias_round(bias_dtype: str, dtype: torch.dtype) -> bool:
    # Rounding a float32 bias to float32 is a no-op: compile it away.
    return bias_dtype == "compute" and dtype != torch.float32


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs must stay float32 in the dots (TF32 would lose ~3 decimal digits and break
    # the comparison with PyTorch's float32 matmul); half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


def _strides(t: torch.Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())


class _AlibiAttention(torch.autograd.Function):
    """Fused causal ALiBi attention; saves (q, k, v, o, lse) and recomputes scores in backward."""

    @staticmethod
    def forward(ctx, q, k, v, slopes, pos_scale, use_bias, bias_dtype, blocks_fwd, blocks_bwd):
        b, h, tq, d = q.shape
        tk = k.shape[2]
        slopes = slopes.to(torch.float32).contiguous()
        o = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)  # (B, H, Tq, hd)
        lse = torch.empty((b * h, tq), dtype=torch.float32, device=q.device)  # log2 units
        block_m, block_n, warps, stages = blocks_fwd or default_blocks(d, q.dtype, backward=False)
        sm_scale = 1.0 / math.sqrt(d)
        grid = (triton.cdiv(tq, block_m), b * h)
        _fwd_kernel[grid](
            q, k, v, slopes, o, lse,
            *_strides(q), *_strides(k), *_strides(v), *_strides(o),
            h, tq, tk, sm_scale, float(pos_scale),
            HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, USE_BIAS=bool(use_bias),
            BIAS_ROUND=_bias_round(bias_dtype, q.dtype), DOT_PRECISION=_dot_precision(q.dtype),
            num_warps=warps, num_stages=stages,
        )
        ctx.save_for_backward(q, k, v, slopes, o, lse)
        ctx.args = (float(pos_scale), bool(use_bias), bias_dtype, blocks_bwd, sm_scale)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, slopes, o, lse = ctx.saved_tensors
        pos_scale, use_bias, bias_dtype, blocks_bwd, sm_scale = ctx.args
        b, h, tq, d = q.shape
        tk = k.shape[2]
        if do.stride(-1) != 1:
            # Strided rows still read correctly (even stride 0 from .sum()), but a unit last
            # stride lets the GPU vectorise the loads of every dO tile.
            do = do.contiguous()
        block_m, block_n, warps, stages = blocks_bwd or default_blocks(d, q.dtype, backward=True)
        delta = torch.empty_like(lse)  # (B*H, Tq) float32
        _bwd_delta_kernel[(triton.cdiv(tq, block_m), b * h)](
            o, do, delta, *_strides(o), *_strides(do), h, tq, HEAD_DIM=d, BLOCK_M=block_m,
        )
        dq = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((b, h, tk, d), dtype=k.dtype, device=k.device)
        dv = torch.empty((b, h, tk, d), dtype=v.dtype, device=v.device)
        common = dict(
            HEAD_DIM=d, BLOCK_M=block_m, BLOCK_N=block_n, USE_BIAS=use_bias,
            BIAS_ROUND=_bias_round(bias_dtype, q.dtype), DOT_PRECISION=_dot_precision(q.dtype),
            num_warps=warps, num_stages=stages,
        )
        strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do))
        _bwd_dkdv_kernel[(triton.cdiv(tk, block_n), b * h)](
            q, k, v, slopes, do, lse, delta, dk, dv, *strides, h, tq, tk, sm_scale, pos_scale, **common
        )
        _bwd_dq_kernel[(triton.cdiv(tq, block_m), b * h)](
            q, k, v, slopes, do, lse, delta, dq, *strides, h, tq, tk, sm_scale, pos_scale, **common
        )
        return dq, dk, dv, None, None, None, None, None, None


def alibi_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, H, Tk, hd)
    v: torch.Tensor,  # (B, H, Tk, hd)
    slopes: torch.Tensor,  # (H,)
    *,
    pos_scale: float = 1.0,
    use_bias: bool = True,
    bias_dtype: str = "float32",
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + slope_h * pos_scale * (j - i_abs)) v, fused, differentiable.

    Query row i sits at absolute position i_abs = i + (Tk - Tq) (bottom-right alignment, the KV
    cache case), so positions are indices times ``pos_scale`` (interpolation passes a factor < 1).
    ``use_bias=False`` runs the same kernels as plain causal attention. ``bias_dtype="compute"``
    rounds the float32 bias to the input dtype before adding it (precision studies); scores and
    softmax stay float32 either way. ``blocks_fwd``/``blocks_bwd`` override the tile sizes as
    (BLOCK_M, BLOCK_N, num_warps, num_stages). Slopes get no gradient (ALiBi's are fixed).
    """
    _check_inputs(q, k, v, slopes, bias_dtype)
    return _AlibiAttention.apply(q, k, v, slopes, pos_scale, use_bias, bias_dtype, blocks_fwd, blocks_bwd)

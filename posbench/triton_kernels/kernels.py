"""The fused attention kernels (Triton, FlashAttention-2 loop order): causal attention with a
position bias computed inside the kernel, chosen by the constexpr ``BIAS`` (0 none, 1 ALiBi, 2 T5,
3 a distance row, 4 a learned distance row; ``bias_spec`` names them), plus, with ``KEY_BIAS``, one
float32 term per key and head (FoX's -F_j) with its gradient. Keys and values may have fewer heads
than the queries (grouped-query attention, read in place). Scores are carried in log2 units
(natural units * log2(e)): exp2 is one instruction on the GPU. Design and limits: docs/kernels.md.

The forward, the backward's delta, dK/dV and dQ kernels; the forward, dK/dV and dQ are also
wrapped in ``triton.autotune`` (``*_tuned``) for ``POSBENCH_AUTOTUNE=1``. Set ``TRITON_INTERPRET=1`` before this module is imported
to run on CPU tensors.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from posbench.triton_kernels.tile_configs import autotune


@triton.jit
def _bucket(
    offs_m_abs,  # (BM,) absolute query index
    offs_n,  # (BN,) key index
    pos_scale,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
):
    """(BM, BN) int32 causal T5 bucket of n = floor(pos_scale * (i_abs - j)), n < 0 -> 0: the
    arithmetic of methods/t5_bias.py's ``relative_position_bucket``, in float32."""
    # For 32/128 the float32 log term stays >= 0.01 from an integer (except at n = max_exact,
    # exact, and n = max_distance, clamped), so a GPU log an ulp off numpy's gives the same bucket.
    dist = offs_m_abs[:, None] - offs_n[None, :]  # (BM, BN) int32
    if SCALED:
        dist = tl.floor(dist.to(tl.float32) * pos_scale).to(tl.int32)
    n = tl.maximum(dist, 0)
    MAX_EXACT: tl.constexpr = NUM_BUCKETS // 2
    LOG_RATIO: tl.constexpr = math.log(MAX_DISTANCE / MAX_EXACT)
    ratio = tl.maximum(n, 1).to(tl.float32) / MAX_EXACT
    large = MAX_EXACT + (tl.log(ratio) / LOG_RATIO * (NUM_BUCKETS - MAX_EXACT)).to(tl.int32)
    large = tl.minimum(large, NUM_BUCKETS - 1)
    return tl.where(n < MAX_EXACT, n, large)


@triton.jit
def _row_index(offs_m_abs, offs_n, seq_k):
    """(BM, BN) index t into a distance row, row[t] the bias at distance Tk - 1 - t; future keys
    (masked by the caller) and padded rows are clamped into the row."""
    t = offs_n[None, :] - offs_m_abs[:, None] + (seq_k - 1)
    return tl.minimum(tl.maximum(t, 0), seq_k - 1)


@triton.jit
def _scores(
    qk,  # (BM, BN) float32, q . k
    offs_m_abs,  # (BM,) absolute query index i + (Tk - Tq)
    offs_n,  # (BN,) key index j
    seq_k,
    sm_scale,
    pos_scale,
    bias_h,  # T5: pointer to the table's column of this head; ROW: to this head's row
    stride_bucket,  # T5: table stride between buckets; ROW: row stride between distances
    bias_scalar,  # ALiBi: slope_h * pos_scale; T5: table[last bucket, h]
    round_like,  # a tile in the input dtype: BIAS_ROUND rounds the ALiBi bias to its dtype
    kb_base,  # KEY_BIAS: pointer to this (batch, head)'s per-key bias, (Tk,) float32
    BIAS: tl.constexpr,
    NEAR: tl.constexpr,  # T5: the tile is within max_distance of the diagonal (else one scalar)
    MASKED: tl.constexpr,  # the tile crosses the diagonal or the key length: mask it
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    KEY_BIAS: tl.constexpr,  # add one float32 term per key (FoX's -F_j), whatever BIAS is
):
    """Scores of one tile in log2 units, float32: (qk * sm_scale + bias) * log2(e), -inf where
    masked. The one place the bias is defined, shared by the forward and backward kernels.
    log2(e) is folded into the scalars (sm_scale, ALiBi's slope, T5's far value) and into each
    read bias as a fused multiply-add, so no pass over the tile multiplies by it at the end."""
    LOG2E_: tl.constexpr = 1.4426950408889634
    s = qk * (sm_scale * LOG2E_)
    if BIAS == 1:  # ALiBi
        # (j - i_abs) is exact in float32 up to 2^24 positions; the product is rounded once.
        dist = (offs_n[None, :] - offs_m_abs[:, None]).to(tl.float32)  # (BM, BN), <= 0 where visible
        if BIAS_ROUND:
            # bias_dtype="compute": the bias as a kernel with input-dtype arithmetic would see it.
            s = s + (bias_scalar * dist).to(round_like.dtype).to(tl.float32) * LOG2E_
        else:
            s = s + (bias_scalar * LOG2E_) * dist
    if BIAS == 2:  # T5
        if NEAR:
            bucket = _bucket(offs_m_abs, offs_n, pos_scale, SCALED, NUM_BUCKETS, MAX_DISTANCE)
            s = s + tl.load(bias_h + bucket * stride_bucket).to(tl.float32) * LOG2E_
        else:
            s = s + bias_scalar * LOG2E_
    if BIAS >= 3:  # a distance row, read per tile: a band of BM + BN - 1 entries
        s = s + tl.load(bias_h + _row_index(offs_m_abs, offs_n, seq_k) * stride_bucket) * LOG2E_
    if KEY_BIAS:
        # keys past seq_k read 0 here and are masked below (only diagonal tiles reach them)
        s = s + tl.load(kb_base + offs_n, mask=offs_n < seq_k, other=0.0)[None, :] * LOG2E_
    if MASKED:
        visible = (offs_n[None, :] <= offs_m_abs[:, None]) & (offs_n[None, :] < seq_k)
        s = tl.where(visible, s, float("-inf"))
    return s


@triton.jit
def _load_rows(base, offs_t, offs_d, stride_t, stride_d, n_rows):
    """(len(offs_t), D) tile of a (T, D) matrix; rows at or past n_rows read as 0."""
    mask = offs_t < n_rows
    return tl.load(base + offs_t[:, None] * stride_t + offs_d[None, :] * stride_d, mask=mask[:, None], other=0.0)


@triton.jit
def _bias_scalar(Bias, h, sbb, sbh, pos_scale, BIAS: tl.constexpr, NUM_BUCKETS: tl.constexpr):
    """Per-head float32 scalar: ALiBi slope * pos_scale; T5 the last bucket's value."""
    value = 0.0
    if BIAS == 2:
        value = tl.load(Bias + (NUM_BUCKETS - 1) * sbb + h * sbh).to(tl.float32)
    if BIAS == 1:
        value = tl.load(Bias + h * sbh).to(tl.float32) * pos_scale
    return value


@triton.jit
def _query_block_ranges(start_m, offset, seq_k, far_dist, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key ranges of a query block [start_m, start_m + BM): far [0, far_hi), full [far_hi, diag_lo),
    diagonal [diag_lo, hi). All bounds are multiples of BLOCK_N except hi."""
    a0 = start_m + offset  # absolute index of the block's first row (< seq_k)
    hi = tl.minimum(seq_k, a0 + BLOCK_M)  # keys past the last row's diagonal are never visible
    # A key tile [n, n + BN) is full when its last key is visible to the first row: n + BN - 1 <= a0.
    diag_lo = ((a0 + 1) // BLOCK_N) * BLOCK_N
    # ... and far when its last key is at least far_dist before the first row.
    far_hi = (tl.maximum(a0 + 1 - far_dist, 0) // BLOCK_N) * BLOCK_N
    return far_hi, diag_lo, hi


# ---------------------------------------------------------------------------------------------
# Forward


@triton.jit
def _fwd_tiles(
    acc,
    l_i,
    m_i,
    q,
    k_base,
    v_base,
    lo,
    hi,
    offs_n0,
    offs_d,
    skt,
    skd,
    svt,
    svd,
    offs_m_abs,
    seq_k,
    sm_scale,
    pos_scale,
    bias_h,
    sbb,
    bias_scalar,
    kb_base,
    BLOCK_N: tl.constexpr,
    BIAS: tl.constexpr,
    NEAR: tl.constexpr,
    MASKED: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
):
    """Online softmax over key tiles [lo, hi) of one query block."""
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k = _load_rows(k_base, offs_n, offs_d, skt, skd, seq_k)  # (BN, D)
        v = _load_rows(v_base, offs_n, offs_d, svt, svd, seq_k)  # (BN, D)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BM, BN) float32
        s = _scores(
            qk,
            offs_m_abs,
            offs_n,
            seq_k,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            q,
            kb_base,
            BIAS,
            NEAR,
            MASKED,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            KEY_BIAS,
        )
        # Every row sees key 0, in the first tile visited, so m_new is finite from then on.
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(s - m_new[:, None])  # (BM, BN)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def fwd_kernel(
    Q,
    K,
    V,
    Bias,
    KB,
    O,
    LSE,
    sqb,
    sqh,
    sqt,
    sqd,
    skb,
    skh,
    skt,
    skd,
    svb,
    svh,
    svt,
    svd,
    sob,
    soh,
    sot,
    sod,
    sbb,
    sbh,
    n_heads,
    group,
    seq_q,
    seq_k,
    far_dist,
    LEN_KEY,
    sm_scale,
    pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
):
    """One program: BLOCK_M query rows of one (batch, head); loops over the visible key tiles.
    Query head h reads key/value head h // group (grouped-query attention; group 1 otherwise)."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    hk = h // group
    offset = seq_k - seq_q  # bottom-right alignment: query row i sits at absolute position i + offset

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BM,)
    offs_m_abs = offs_m + offset
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n0 = tl.arange(0, BLOCK_N)
    mask_m = offs_m < seq_q
    q = _load_rows(Q + b * sqb + h * sqh, offs_m, offs_d, sqt, sqd, seq_q)  # (BM, D)
    k_base = K + b * skb + hk * skh
    v_base = V + b * svb + hk * svh
    bias_h = Bias + h * sbh
    kb_base = KB + pid_bh * seq_k  # (B*H, Tk) contiguous
    bias_scalar = _bias_scalar(Bias, h, sbb, sbh, pos_scale, BIAS, NUM_BUCKETS)

    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)  # running row max (log2 units)
    l_i = tl.zeros((BLOCK_M,), tl.float32)  # running row sum of exp2(s - m_i)
    acc = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)

    far_hi, diag_lo, hi = _query_block_ranges(pid_m * BLOCK_M, offset, seq_k, far_dist, BLOCK_M, BLOCK_N)
    acc, l_i, m_i = _fwd_tiles(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        0,
        far_hi,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m_abs,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        BLOCK_N,
        BIAS,
        False,
        False,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )
    acc, l_i, m_i = _fwd_tiles(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        far_hi,
        diag_lo,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m_abs,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        BLOCK_N,
        BIAS,
        True,
        False,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )
    acc, l_i, m_i = _fwd_tiles(
        acc,
        l_i,
        m_i,
        q,
        k_base,
        v_base,
        diag_lo,
        hi,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m_abs,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        BLOCK_N,
        BIAS,
        True,
        True,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )

    acc = acc / l_i[:, None]
    o_ptrs = O + b * sob + h * soh + offs_m[:, None] * sot + offs_d[None, :] * sod
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=mask_m[:, None])
    # log-sum-exp in log2 units, all the backward pass needs to rebuild the probabilities.
    tl.store(LSE + pid_bh * seq_q + offs_m, m_i + tl.math.log2(l_i), mask=mask_m)


# ---------------------------------------------------------------------------------------------
# Backward


@triton.jit
def bwd_delta_kernel(
    O,
    DO,
    Delta,
    sob,
    soh,
    sot,
    sod,
    sdb,
    sdh,
    sdt,
    sdd,
    n_heads,
    seq_q,
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
def _dkdv_tiles(
    dk,
    dv,
    dkb,
    k,
    v,
    q_base,
    do_base,
    lse_base,
    delta_base,
    lo,
    hi,
    offs_m0,
    offs_d,
    sqt,
    sqd,
    sdt,
    sdd,
    offs_n,
    seq_q,
    seq_k,
    offset,
    sm_scale,
    pos_scale,
    bias_h,
    sbb,
    bias_scalar,
    kb_base,
    BLOCK_M: tl.constexpr,
    BIAS: tl.constexpr,
    NEAR: tl.constexpr,
    MASKED: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
):
    """dK, dV (and, with KEY_BIAS, the per-key column sums of dScore) of query blocks [lo, hi) to one key block."""
    for start_m in range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0
        mask_m = offs_m < seq_q
        q = _load_rows(q_base, offs_m, offs_d, sqt, sqd, seq_q)  # (BM, D)
        do = _load_rows(do_base, offs_m, offs_d, sdt, sdd, seq_q)
        # Padded rows (i >= Tq) get lse = +inf so their probabilities are exactly 0.
        lse = tl.load(lse_base + offs_m, mask=mask_m, other=float("inf"))
        delta = tl.load(delta_base + offs_m, mask=mask_m, other=0.0)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)  # (BM, BN)
        s = _scores(
            qk,
            offs_m + offset,
            offs_n,
            seq_k,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            q,
            kb_base,
            BIAS,
            NEAR,
            MASKED,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            KEY_BIAS,
        )
        p = tl.math.exp2(s - lse[:, None])  # (BM, BN) float32, the forward's probabilities
        dv += tl.dot(tl.trans(p.to(do.dtype)), do, input_precision=DOT_PRECISION)
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # (BM, BN)
        ds = p * (dp - delta[:, None])  # dScore (natural units); 0 where masked and in padded rows
        dk += tl.dot(tl.trans(ds.to(q.dtype)), q, input_precision=DOT_PRECISION)
        if KEY_BIAS:
            dkb += tl.sum(ds, 0)  # d bias_j = sum_i dScore_ij, in float32
    return dk, dv, dkb


@triton.jit
def bwd_dkdv_kernel(
    Q,
    K,
    V,
    Bias,
    KB,
    DO,
    LSE,
    Delta,
    DK,
    DV,
    DKB,
    sqb,
    sqh,
    sqt,
    sqd,
    skb,
    skh,
    skt,
    skd,
    svb,
    svh,
    svt,
    svd,
    sdb,
    sdh,
    sdt,
    sdd,
    sbb,
    sbh,
    n_heads,
    seq_q,
    seq_k,
    far_dist,
    LEN_KEY,
    sm_scale,
    pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
    # Query heads per key/value head. A constexpr: the loop over them is unrolled, so GROUP 1 is
    # the kernel without GQA; a runtime loop kept k, v, dK and dV live across it and spilled at
    # the offered tiles (compile report: 10 of 48 claims lost).
    GROUP: tl.constexpr,
):
    """One program: dK, dV of BLOCK_N keys of one key/value head, summed over the GROUP query
    heads that read it (grouped-query attention) and the query blocks that see them; DK and DV are
    contiguous (B, Hkv, Tk, D) buffers, whatever the layout of K and V. With KEY_BIAS also each
    query head's d bias of these keys, to DKB ((B*H, Tk) float32)."""
    pid_n = tl.program_id(0)
    pid_bk = tl.program_id(1)  # batch * Hkv + key/value head
    n_kv_heads = n_heads // GROUP
    b = pid_bk // n_kv_heads
    hk = pid_bk % n_kv_heads
    offset = seq_k - seq_q
    start_n = pid_n * BLOCK_N

    offs_n = start_n + tl.arange(0, BLOCK_N)  # (BN,)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_m0 = tl.arange(0, BLOCK_M)
    mask_n = offs_n < seq_k
    k = _load_rows(K + b * skb + hk * skh, offs_n, offs_d, skt, skd, seq_k)  # (BN, D)
    v = _load_rows(V + b * svb + hk * svh, offs_n, offs_d, svt, svd, seq_k)

    # Query blocks in order: diagonal [lo, diag_hi) (some row cannot see some key: masked), full
    # [diag_hi, far_lo), far [far_lo, seq_q). Row i sees key j iff i + offset >= j; all bounds are
    # clamped at 0 before dividing (integer division of negatives differs between GPU and numpy).
    last_key = start_n + BLOCK_N - 1
    lo = (tl.maximum(start_n - offset, 0) // BLOCK_M) * BLOCK_M
    diag_hi = tl.cdiv(tl.maximum(last_key - offset, 0), BLOCK_M) * BLOCK_M
    if start_n + BLOCK_N > seq_k:  # a partial key block: every tile needs the key-length mask
        diag_hi = seq_q
    diag_hi = tl.minimum(tl.maximum(diag_hi, lo), seq_q)
    far_lo = tl.cdiv(tl.maximum(last_key + far_dist - offset, 0), BLOCK_M) * BLOCK_M
    far_lo = tl.minimum(tl.maximum(far_lo, diag_hi), seq_q)

    dk = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    dv = tl.zeros((BLOCK_N, HEAD_DIM), tl.float32)
    for g in tl.static_range(GROUP):
        h = hk * GROUP + g  # a query head of this key/value head
        bh = b * n_heads + h
        bias_h = Bias + h * sbh
        bias_scalar = _bias_scalar(Bias, h, sbb, sbh, pos_scale, BIAS, NUM_BUCKETS)
        q_base, do_base = Q + b * sqb + h * sqh, DO + b * sdb + h * sdh
        lse_base, delta_base = LSE + bh * seq_q, Delta + bh * seq_q
        kb_base = KB + bh * seq_k
        dkb = tl.zeros((BLOCK_N,), tl.float32)
        dk, dv, dkb = _dkdv_tiles(
            dk,
            dv,
            dkb,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            lo,
            diag_hi,
            offs_m0,
            offs_d,
            sqt,
            sqd,
            sdt,
            sdd,
            offs_n,
            seq_q,
            seq_k,
            offset,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            kb_base,
            BLOCK_M,
            BIAS,
            True,
            True,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            DOT_PRECISION,
            KEY_BIAS,
        )
        dk, dv, dkb = _dkdv_tiles(
            dk,
            dv,
            dkb,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            diag_hi,
            far_lo,
            offs_m0,
            offs_d,
            sqt,
            sqd,
            sdt,
            sdd,
            offs_n,
            seq_q,
            seq_k,
            offset,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            kb_base,
            BLOCK_M,
            BIAS,
            True,
            False,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            DOT_PRECISION,
            KEY_BIAS,
        )
        dk, dv, dkb = _dkdv_tiles(
            dk,
            dv,
            dkb,
            k,
            v,
            q_base,
            do_base,
            lse_base,
            delta_base,
            far_lo,
            seq_q,
            offs_m0,
            offs_d,
            sqt,
            sqd,
            sdt,
            sdd,
            offs_n,
            seq_q,
            seq_k,
            offset,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            kb_base,
            BLOCK_M,
            BIAS,
            False,
            False,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            DOT_PRECISION,
            KEY_BIAS,
        )
        if KEY_BIAS:
            tl.store(DKB + bh * seq_k + offs_n, dkb, mask=mask_n)

    dk = dk * sm_scale
    out = offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DK + pid_bk * seq_k * HEAD_DIM + out, dk.to(DK.dtype.element_ty), mask=mask_n[:, None])
    tl.store(DV + pid_bk * seq_k * HEAD_DIM + out, dv.to(DV.dtype.element_ty), mask=mask_n[:, None])


@triton.jit
def _dq_tiles(
    dq,
    dtab,
    q,
    do,
    lse,
    delta,
    k_base,
    v_base,
    lo,
    hi,
    offs_n0,
    offs_d,
    skt,
    skd,
    svt,
    svd,
    offs_m_abs,
    seq_k,
    sm_scale,
    pos_scale,
    bias_h,
    sbb,
    bias_scalar,
    kb_base,
    drow_h,  # ROW_LEARNED: this head's (Tk,) float32 row gradient, added to atomically
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BIAS: tl.constexpr,
    NEAR: tl.constexpr,
    MASKED: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
):
    """dQ (and, for T5, the per-bucket sums of dScore; for a learned row its per-distance sums)
    over key tiles [lo, hi) of one query block."""
    bucket_ids = tl.arange(0, NUM_BUCKETS)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        k = _load_rows(k_base, offs_n, offs_d, skt, skd, seq_k)  # (BN, D)
        v = _load_rows(v_base, offs_n, offs_d, svt, svd, seq_k)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        s = _scores(
            qk,
            offs_m_abs,
            offs_n,
            seq_k,
            sm_scale,
            pos_scale,
            bias_h,
            sbb,
            bias_scalar,
            q,
            kb_base,
            BIAS,
            NEAR,
            MASKED,
            BIAS_ROUND,
            SCALED,
            NUM_BUCKETS,
            MAX_DISTANCE,
            KEY_BIAS,
        )
        p = tl.math.exp2(s - lse[:, None])
        dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)
        ds = p * (dp - delta[:, None])  # (BM, BN); 0 where masked and in padded rows (p = 0)
        dq += tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION)
        if BIAS == 2:
            if NEAR:
                # Scatter-add into the buckets the tile holds (a handful, except near the diagonal).
                bucket = _bucket(offs_m_abs, offs_n, pos_scale, SCALED, NUM_BUCKETS, MAX_DISTANCE)
                for bk in range(tl.min(bucket), tl.max(bucket) + 1):
                    part = tl.sum(tl.sum(tl.where(bucket == bk, ds, 0.0), 1), 0)
                    dtab += tl.where(bucket_ids == bk, part, 0.0)
            else:  # every entry is in the last bucket
                dtab += tl.where(bucket_ids == NUM_BUCKETS - 1, tl.sum(tl.sum(ds, 1), 0), 0.0)
        if BIAS == 4:
            # d row_t = sum of dScore over the scores at that distance (batches and query blocks
            # included), added atomically: float32, so not bit-reproducible on a GPU. A tile's
            # diagonal c - r is one distance; skewed (row r rotated left by r), column c' holds
            # the diagonals c' - k * BN, so one column sum per k gives a vector of distinct
            # addresses: a few vector atomics per tile instead of one per score. Masked scores
            # and padded rows hold dScore 0 exactly (p = 0), so they add nothing.
            rows = tl.arange(0, BLOCK_M)[:, None]
            cols = tl.arange(0, BLOCK_N)
            shifted = cols[None, :] + rows  # (BM, BN)
            skewed = tl.gather(ds, shifted % BLOCK_N, axis=1)  # skewed[r, c'] = ds[r, (c' + r) % BN]
            wraps = shifted // BLOCK_N
            t0 = start_n - tl.min(offs_m_abs, 0) + (seq_k - 1)  # row index of the tile's diagonal c = r
            for k in tl.static_range((BLOCK_M + BLOCK_N - 2) // BLOCK_N + 1):
                t = t0 + cols - k * BLOCK_N  # (BN,)
                part = tl.sum(tl.where(wraps == k, skewed, 0.0), 0)
                tl.atomic_add(drow_h + t * sbb, part, mask=(t >= 0) & (t < seq_k))
    return dq, dtab


@triton.jit
def bwd_dq_kernel(
    Q,
    K,
    V,
    Bias,
    KB,
    DO,
    LSE,
    Delta,
    DQ,
    DTab,
    sqb,
    sqh,
    sqt,
    sqd,
    skb,
    skh,
    skt,
    skd,
    svb,
    svh,
    svt,
    svd,
    sdb,
    sdh,
    sdt,
    sdd,
    sbb,
    sbh,
    n_heads,
    group,
    seq_q,
    seq_k,
    far_dist,
    LEN_KEY,
    dtab_blocks,
    sm_scale,
    pos_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BIAS: tl.constexpr,
    BIAS_ROUND: tl.constexpr,
    SCALED: tl.constexpr,
    NUM_BUCKETS: tl.constexpr,
    MAX_DISTANCE: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    KEY_BIAS: tl.constexpr,
):
    """One program: dQ of BLOCK_M query rows over the same key tiles as the forward; for T5 also
    this block's per-bucket sums of dScore, stored to row (pid_bh, pid_m) of DTab
    ((B*H, dtab_blocks, NUM_BUCKETS) float32)."""
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
    k_base, v_base = K + b * skb + (h // group) * skh, V + b * svb + (h // group) * svh
    bias_h = Bias + h * sbh
    kb_base = KB + pid_bh * seq_k
    drow_h = DTab + h * sbh  # ROW_LEARNED: DTab is the row gradient, laid out as the row
    bias_scalar = _bias_scalar(Bias, h, sbb, sbh, pos_scale, BIAS, NUM_BUCKETS)

    dq = tl.zeros((BLOCK_M, HEAD_DIM), tl.float32)
    dtab = tl.zeros((NUM_BUCKETS,), tl.float32)
    far_hi, diag_lo, hi = _query_block_ranges(pid_m * BLOCK_M, offset, seq_k, far_dist, BLOCK_M, BLOCK_N)
    dq, dtab = _dq_tiles(
        dq,
        dtab,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        0,
        far_hi,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m + offset,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        drow_h,
        BLOCK_M,
        BLOCK_N,
        BIAS,
        False,
        False,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )
    dq, dtab = _dq_tiles(
        dq,
        dtab,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        far_hi,
        diag_lo,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m + offset,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        drow_h,
        BLOCK_M,
        BLOCK_N,
        BIAS,
        True,
        False,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )
    dq, dtab = _dq_tiles(
        dq,
        dtab,
        q,
        do,
        lse,
        delta,
        k_base,
        v_base,
        diag_lo,
        hi,
        offs_n0,
        offs_d,
        skt,
        skd,
        svt,
        svd,
        offs_m + offset,
        seq_k,
        sm_scale,
        pos_scale,
        bias_h,
        sbb,
        bias_scalar,
        kb_base,
        drow_h,
        BLOCK_M,
        BLOCK_N,
        BIAS,
        True,
        True,
        BIAS_ROUND,
        SCALED,
        NUM_BUCKETS,
        MAX_DISTANCE,
        DOT_PRECISION,
        KEY_BIAS,
    )

    dq = dq * sm_scale
    out = offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(DQ + pid_bh * seq_q * HEAD_DIM + out, dq.to(DQ.dtype.element_ty), mask=mask_m[:, None])
    if BIAS == 2:
        tl.store(DTab + (pid_bh * dtab_blocks + pid_m) * NUM_BUCKETS + tl.arange(0, NUM_BUCKETS), dtab)


fwd_tuned = autotune("fwd")(fwd_kernel)
dkdv_tuned = autotune("bwd")(bwd_dkdv_kernel)
dq_tuned = autotune("bwd", reset=["DTab"])(bwd_dq_kernel)

"""Causal flash attention with a position bias computed inside the kernel: none, ALiBi or T5,
plus, optionally, one float32 term per key and head (FoX's -F_j) with its gradient.

One set of Triton kernels (FlashAttention-2 loop order) serves the three biases, chosen by the
constexpr ``BIAS`` (the per-key term by ``KEY_BIAS``); keys and values may have fewer heads than
the queries (grouped-query attention, read in place). Design, tiles, dTable and limits are in
docs/kernels.md. Set
``TRITON_INTERPRET=1`` before this module is imported to run on CPU tensors: ``triton.jit``
decides at decoration time whether to compile or interpret.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from posbench.triton_kernels import tuning

# True when this module's kernels were built by the interpreter (TRITON_INTERPRET=1 at import).
INTERPRETED = bool(triton.knobs.runtime.interpret)

HEAD_DIMS = (32, 64, 128)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# ROW: a bias of the distance alone read from a per-distance row (h, Tk); ROW_LEARNED: the same,
# and the backward returns the row's gradient.
NO_BIAS, ALIBI, T5, ROW, ROW_LEARNED = 0, 1, 2, 3, 4
BIAS_NAMES = {NO_BIAS: "none", ALIBI: "alibi", T5: "t5", ROW: "row", ROW_LEARNED: "row-learned"}
# exp2 is one instruction on the GPU; scores are carried in log2 units (natural units * LOG2E).
LOG2E = 1.4426950408889634
# A distance no tile reaches: the "far" segment of the loops is empty for ALiBi and no bias.
NEVER_FAR = 1 << 30


# ---------------------------------------------------------------------------------------------
# Tile configurations


class TileConfig:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) and, per target, the largest head dim it fits
    without spills, as ``sm80=(half, fp32)``; sm86 covers sm_86/sm_89; 0 = not offered."""

    def __init__(self, block_m, block_n, warps, stages, sm80, sm86, sm90):
        self.block_m, self.block_n, self.warps, self.stages = block_m, block_n, warps, stages
        self.fits = {}
        for arch, (half, fp32) in ((80, sm80), (86, sm86), (90, sm90)):
            self.fits[(arch, "half")], self.fits[(arch, "fp32")] = half, fp32

    def allows(self, arch: int, dtype_class: str, head_dim: int) -> bool:
        return head_dim <= self.fits.get((arch, dtype_class), 0)

    def blocks(self) -> tuple[int, int, int, int]:
        return self.block_m, self.block_n, self.warps, self.stages

    def triton(self) -> triton.Config:
        return triton.Config({"BLOCK_M": self.block_m, "BLOCK_N": self.block_n}, num_warps=self.warps, num_stages=self.stages)

    def __repr__(self) -> str:
        return f"m{self.block_m}n{self.block_n}w{self.warps}s{self.stages}"


# Candidates per kernel, from the compile report (posbench/triton_kernels/compile_report.py; T5, the
# bias that needs the most registers): a config is offered only where it neither spills registers
# nor exceeds shared memory. Measured with ptxas (registers / spill bytes / shared KB, T5):
#   fwd  m128n64w8s3 half d128 sm_90: 255 / 284 / 128;  half d64 sm_90: 255 / 56 / 96
#   fwd  m64n64w4s3  half d128 sm_90: 255 / 272 / 80;   half d64 sm_90: 255 / 76 / 56
#   fwd  m64n64w4s3  fp32 d128 sm_80: 32 / 84728 / 208
#   fwd  m64n32w4s2  half d128 sm_90: 240 / 0 / 40;     half d128 sm_80: 255 / 8 / 36
#   fwd  m64n32w4s2  half d64  sm_80: 255 / 0 / 20
#   bwd  m64n64w8s2  half d128 sm_90: dQ 255 / 172, dK/dV 255 / 760 (ALiBi dQ: 253 / 0)
#   bwd  m32n64w4s2  half d64  sm_90: dQ 255 / 8; dK/dV 250 / 0
#   bwd  m32n32w4s2  half d128 sm_90: dQ 191 / 0 / 32, dK/dV 240 / 0 / 38
#   bwd  m32n32w4s2  half d128 sm_80: dQ 255 / 0 / 32, dK/dV 255 / 0 / 38
#   bwd  m32n32w4s2  fp32 d128 sm_80: dQ 168 / 4836 / 68, dK/dV 32 / 53676 / 52
# Entries below that were not measured are the smaller head dims of a measured config, or d <= 32;
# the slow compile-report test checks every one. Where nothing is offered (float32 at head dim
# >= 64, half at d128 on sm_80/86 for the forward) the last config runs: within shared memory,
# with some spills.
CONFIGS = {
    "fwd": [
        # sm_80/86 half: the T5 forward spills 8 bytes at head dim 32 (255 registers) since log2(e)
        # was folded into the bias reads (issue 54); the tuner may still time it there
        TileConfig(128, 64, 8, 3, sm80=(0, 0), sm86=(0, 0), sm90=(32, 0)),
        # sm_90 half: the T5 forward spills 8 bytes at head dim 32 (255 registers)
        TileConfig(64, 64, 4, 3, sm80=(32, 0), sm86=(32, 0), sm90=(0, 0)),
        # sm_90 fp32: the T5 forward spills 72 bytes at head dim 32
        TileConfig(64, 32, 4, 2, sm80=(64, 32), sm86=(64, 32), sm90=(128, 0)),
    ],
    "bwd": [
        TileConfig(64, 64, 8, 2, sm80=(32, 0), sm86=(32, 0), sm90=(32, 0)),
        # sm_80/86 half: the ALiBi dQ kernel spills 8 bytes at head dim 32 (168 registers)
        TileConfig(32, 64, 4, 2, sm80=(0, 0), sm86=(0, 0), sm90=(32, 0)),
        # fp32: dK/dV spills 1.4-2.2 KB at head dim 32 on every target (fp32 dots are FMA loops);
        # float32 backward therefore runs this config as the spilling fallback (configs_for)
        TileConfig(32, 32, 4, 2, sm80=(128, 0), sm86=(128, 0), sm90=(128, 0)),
    ],
}
INTERPRETER_CONFIG = TileConfig(32, 32, 1, 1, (0, 0), (0, 0), (0, 0))


def dtype_class(dtype) -> str:
    return "fp32" if dtype in (torch.float32, tl.float32) else "half"


def configs_for(kernel: str, arch: int, dtype: torch.dtype, head_dim: int) -> list[TileConfig]:
    """The configs of ``kernel`` ("fwd"/"bwd") that fit ``arch``; else the last, which spills."""
    arch = 90 if arch >= 90 else 86 if arch > 80 else 80  # sm_86/sm_89: sm_80's code, 99 KB of shared memory
    chosen = [c for c in CONFIGS[kernel] if c.allows(arch, dtype_class(dtype), head_dim)]
    return chosen or [CONFIGS[kernel][-1]]


def device_arch(device) -> int:
    """Compute capability as one number: 90 for sm_90."""
    major, minor = torch.cuda.get_device_capability(device)
    return major * 10 + minor


def choose_blocks(kernel: str, arch: int | None, dtype: torch.dtype, head_dim: int, bias: str) -> tuple | None:
    """The blocks (BLOCK_M, BLOCK_N, warps, stages) ``kernel`` ("fwd", "dkdv", "dq") launches with:
    the interpreter's one config (``arch`` None); None under ``POSBENCH_AUTOTUNE=1`` (autotune over
    the offered configs); the table timed on ``arch`` (``tuning``); else the first offered config."""
    if arch is None:
        return INTERPRETER_CONFIG.blocks()
    if tuning.autotune_requested():
        return None
    tuned = tuning.tuned_blocks(arch, kernel, str(dtype), head_dim, bias)
    if tuned is not None:
        return tuned
    return configs_for("fwd" if kernel == "fwd" else "bwd", arch, dtype, head_dim)[0].blocks()


def tiles_used(arch: int | None, dtype: torch.dtype, head_dim: int, bias: str) -> str:
    """What ``choose_blocks`` gives the three kernels, and from where: a row records it."""
    parts = []
    for kernel in tuning.KERNELS:
        blocks = choose_blocks(kernel, arch, dtype, head_dim, bias)
        if blocks is None:
            parts.append(f"{kernel} autotuned")
            continue
        tuned = arch is not None and tuning.tuned_blocks(arch, kernel, str(dtype), head_dim, bias) is not None
        source = "interpreter" if arch is None else f"tuned sm{arch}" if tuned else "offline"
        parts.append(f"{kernel} m{blocks[0]}n{blocks[1]}w{blocks[2]}s{blocks[3]} ({source})")
    return ", ".join(parts)


def _prune(kernel: str):
    def prune(configs, named_args, **kwargs):
        if INTERPRETED:
            return configs
        major, minor = torch.cuda.get_device_capability()
        wanted = {repr(c) for c in configs_for(kernel, major * 10 + minor, named_args["Q"].dtype, kwargs["HEAD_DIM"])}
        kept = [c for c in configs if _repr(c) in wanted]
        return kept or configs[-1:]

    return prune


def _repr(config: triton.Config) -> str:
    kw = config.kwargs
    return f"m{kw['BLOCK_M']}n{kw['BLOCK_N']}w{config.num_warps}s{config.num_stages}"


def _autotune(kernel: str, reset=None):
    configs = [INTERPRETER_CONFIG.triton()] if INTERPRETED else [c.triton() for c in CONFIGS[kernel]]
    return triton.autotune(
        configs=configs,
        key=["LEN_KEY", "HEAD_DIM", "BIAS"],
        prune_configs_by={"early_config_prune": _prune(kernel)},
        reset_to_zero=reset,
    )


def length_key(seq_k: int) -> int:
    """The key length rounded up to a power of two: one tuning per octave of lengths."""
    return 1 << max(seq_k - 1, 0).bit_length()


# ---------------------------------------------------------------------------------------------
# Kernels: helpers


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
def _fwd_kernel(
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
def _bwd_delta_kernel(
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
def _bwd_dkdv_kernel(
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
def _bwd_dq_kernel(
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


_fwd_tuned = _autotune("fwd")(_fwd_kernel)
_dkdv_tuned = _autotune("bwd")(_bwd_dkdv_kernel)
_dq_tuned = _autotune("bwd", reset=["DTab"])(_bwd_dq_kernel)


# ---------------------------------------------------------------------------------------------
# Launch


def check_key_bias(name: str, q, k, key_bias) -> None:
    """One-line errors for a per-key bias the kernels cannot take: (B, H, Tk), float, q's device."""
    if not isinstance(key_bias, torch.Tensor):
        raise TypeError(f"{name}: key_bias must be a torch.Tensor, got {type(key_bias).__name__}")
    want = (q.shape[0], q.shape[1], k.shape[2])
    if tuple(key_bias.shape) != want:
        raise ValueError(f"{name}: key_bias must have shape {want} (batch, query heads, keys), got {tuple(key_bias.shape)}")
    if not key_bias.is_floating_point():
        raise TypeError(f"{name}: key_bias must be a float tensor, got {key_bias.dtype}")
    if key_bias.device != q.device:
        raise ValueError(f"{name}: key_bias must be on q's device {q.device}, got {key_bias.device}")


def check_device(name: str, q: torch.Tensor) -> None:
    """One-line errors for a device or dtype this build of the kernels cannot run."""
    if q.device.type == "cuda" and INTERPRETED:
        raise RuntimeError(f"{name}: CUDA tensors given but TRITON_INTERPRET=1 was set when the kernels were built")
    if q.device.type == "cpu" and not INTERPRETED:
        raise RuntimeError(f"{name}: CPU tensors need TRITON_INTERPRET=1 set before import; use a CUDA device")
    if q.device.type not in ("cpu", "cuda"):
        raise RuntimeError(f"{name}: device {q.device} not supported; use a CUDA device")
    if INTERPRETED and q.dtype == torch.bfloat16:
        raise TypeError(f"{name}: bfloat16 is not supported by the Triton interpreter")


def check_qkv(name: str, q, k, v) -> None:
    """One-line errors for q, k, v the kernels cannot take."""
    for label, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: {label} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}: {label} must be (B, H, T, head_dim), got shape {tuple(t.shape)}")
    if q.dtype not in DTYPES:
        raise TypeError(f"{name}: dtype {q.dtype} not supported; use float16, bfloat16 or float32")
    if k.dtype != q.dtype or v.dtype != q.dtype:
        raise TypeError(f"{name}: q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    b, h, tq, d = q.shape
    if d not in HEAD_DIMS:
        raise ValueError(f"{name}: head_dim {d} not supported; use one of {', '.join(map(str, HEAD_DIMS))}")
    if k.shape != v.shape or k.shape[0] != b or k.shape[1] < 1 or h % k.shape[1] or k.shape[3] != d:
        raise ValueError(
            f"{name}: k and v must be (B, Hkv, Tk, head_dim) = ({b}, Hkv, Tk, {d}) with Hkv dividing H = {h}, "
            f"got k {tuple(k.shape)} and v {tuple(v.shape)}"
        )
    tk = k.shape[2]
    if tq < 1 or tq > tk:
        raise ValueError(f"{name}: need 1 <= query length <= key length, got Tq={tq}, Tk={tk}")


def _dot_precision(dtype: torch.dtype) -> str:
    # float32 inputs must stay float32 in the dots (TF32 would lose ~3 decimal digits and break
    # the comparison with PyTorch's float32 matmul); half types ignore the setting.
    return "ieee" if dtype == torch.float32 else "tf32"


def _strides(t: torch.Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())


def _launch(kernel, tuned, blocks, grid_len, bh, args, consts):
    """Launch ``tuned`` (autotuned), or ``kernel`` with explicit ``blocks`` (BM, BN, warps, stages)."""
    if blocks is None:
        block = "BLOCK_M" if grid_len[1] == "m" else "BLOCK_N"
        tuned[lambda meta: (triton.cdiv(grid_len[0], meta[block]), bh)](*args, **consts)
        return
    block_m, block_n, warps, stages = blocks
    size = block_m if grid_len[1] == "m" else block_n
    kernel[(triton.cdiv(grid_len[0], size), bh)](
        *args, **consts, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages
    )


class BiasSpec:
    """The bias of one call: ``tensor`` is ALiBi's slopes (H,), T5's table (buckets, H) or a
    distance row (1 or H, Tk) float32 contiguous;
    ``far_dist`` is T5's smallest distance from which every entry is in the last bucket;
    ``key_bias`` (B, H, Tk), or None, one more term per key added to either (FoX's -F_j)."""

    def __init__(
        self,
        kind: int,
        tensor: torch.Tensor,
        pos_scale: float = 1.0,
        bias_round: bool = False,
        num_buckets: int = 32,
        max_distance: int = 128,
        key_bias: torch.Tensor | None = None,
    ):
        self.kind, self.tensor, self.pos_scale = kind, tensor, float(pos_scale)
        self.key_bias = key_bias
        self.bias_round, self.num_buckets, self.max_distance = bias_round, num_buckets, max_distance
        self.far_dist = far_distance(max_distance, self.pos_scale) if kind == T5 else NEVER_FAR

    def strides(self) -> tuple[int, int]:
        """(stride between buckets, stride between heads) of the bias tensor."""
        if self.kind == T5:
            return tuple(self.tensor.stride())
        if self.kind in (ROW, ROW_LEARNED):  # one row shared by every head: head stride 0
            return self.tensor.stride(1), self.tensor.stride(0) if self.tensor.shape[0] > 1 else 0
        return 0, self.tensor.stride(0)

    def tuning_name(self) -> str:
        """The bias as the tuned table names it: "alibi", "t5", ..., "+key" with a per-key term."""
        return BIAS_NAMES[self.kind] + ("+key" if self.key_bias is not None else "")

    def consts(self, dtype: torch.dtype, head_dim: int) -> dict:
        return dict(
            HEAD_DIM=head_dim,
            BIAS=self.kind,
            BIAS_ROUND=self.bias_round,
            SCALED=self.pos_scale != 1.0,
            NUM_BUCKETS=self.num_buckets,
            MAX_DISTANCE=self.max_distance,
            DOT_PRECISION=_dot_precision(dtype),
            KEY_BIAS=self.key_bias is not None,
        )


def far_distance(max_distance: int, pos_scale: float) -> int:
    """Smallest index distance d with floor(float32(d * pos_scale)) >= max_distance: from there on
    every larger distance is in the last bucket too (the float32 product is monotone in d)."""
    scale = torch.tensor(pos_scale, dtype=torch.float32)
    d = max(1, math.ceil(max_distance / max(pos_scale, 1e-30)) - 2)
    while torch.floor(torch.tensor(float(d), dtype=torch.float32) * scale).item() < max_distance:
        d += 1
    return min(d, NEVER_FAR)


class _FusedAttention(torch.autograd.Function):
    """Fused causal attention with an in-kernel bias; saves (q, k, v, o, lse), recomputes scores.
    k and v may hold fewer heads than q (grouped-query attention: query head h reads h // group)."""

    @staticmethod
    def forward(ctx, q, k, v, bias_tensor, key_bias, spec, blocks):
        # blocks: (fwd, dK/dV, dQ), each (BLOCK_M, BLOCK_N, warps, stages), or None to autotune it
        blocks_fwd, blocks_dkdv, blocks_dq = blocks
        b, h, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        o = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)  # (B, H, Tq, hd)
        lse = torch.empty((b * h, tq), dtype=torch.float32, device=q.device)  # log2 units
        sm_scale = 1.0 / math.sqrt(d)
        # (B, H, Tk) float32, contiguous: one row per program's (batch, head); without one the kernels
        # never read the pointer (KEY_BIAS off), so any float32 tensor stands in.
        kb = lse if key_bias is None else key_bias.detach().to(torch.float32).contiguous()
        args = (
            q,
            k,
            v,
            bias_tensor,
            kb,
            o,
            lse,
            *_strides(q),
            *_strides(k),
            *_strides(v),
            *_strides(o),
            *spec.strides(),
            h,
            h // hkv,
            tq,
            tk,
            spec.far_dist,
            length_key(tk),
            sm_scale,
            spec.pos_scale,
        )
        _launch(_fwd_kernel, _fwd_tuned, blocks_fwd, (tq, "m"), b * h, args, spec.consts(q.dtype, d))
        ctx.save_for_backward(q, k, v, bias_tensor, kb, o, lse)
        ctx.args = (spec, (blocks_dkdv, blocks_dq), sm_scale, key_bias is not None and key_bias.dtype)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias_tensor, kb, o, lse = ctx.saved_tensors
        spec, (blocks_dkdv, blocks_dq), sm_scale, kb_dtype = ctx.args
        b, h, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        if do.stride(-1) != 1:
            # Strided rows still read correctly (even stride 0 from .sum()), but a unit last
            # stride lets the GPU vectorise the loads of every dO tile.
            do = do.contiguous()
        delta = torch.empty_like(lse)  # (B*H, Tq) float32
        _bwd_delta_kernel[(triton.cdiv(tq, 32), b * h)](
            o,
            do,
            delta,
            *_strides(o),
            *_strides(do),
            h,
            tq,
            HEAD_DIM=d,
            BLOCK_M=32,
        )
        dq = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((b, hkv, tk, d), dtype=k.dtype, device=k.device)  # summed over each group
        dv = torch.empty((b, hkv, tk, d), dtype=v.dtype, device=v.device)
        dkb = torch.empty((b, h, tk), dtype=torch.float32, device=q.device) if kb_dtype else delta
        consts = spec.consts(q.dtype, d)
        strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do), *spec.strides())
        shape = (h, tq, tk, spec.far_dist, length_key(tk))
        _launch(  # one program per key block and key/value head: no atomics, deterministic
            _bwd_dkdv_kernel,
            _dkdv_tuned,
            blocks_dkdv,
            (tk, "n"),
            b * hkv,
            (q, k, v, bias_tensor, kb, do, lse, delta, dk, dv, dkb, *strides, *shape, sm_scale, spec.pos_scale),
            {**consts, "GROUP": h // hkv},
        )
        # T5: one row of per-bucket partial sums per (batch*head, query block), sized for the
        # smallest BLOCK_M any config may use; rows a larger BLOCK_M leaves unwritten stay 0.
        min_block_m = blocks_dq[0] if blocks_dq else min(c.kwargs["BLOCK_M"] for c in _dq_tuned.configs)
        dtab_blocks = triton.cdiv(tq, min_block_m) if spec.kind == T5 else 1
        if spec.kind == ROW_LEARNED:  # the row's gradient, laid out as the row: (1 or H, Tk)
            partial = torch.zeros_like(bias_tensor, dtype=torch.float32)
        else:
            partial = torch.zeros((b * h, dtab_blocks, spec.num_buckets), dtype=torch.float32, device=q.device)
        _launch(
            _bwd_dq_kernel,
            _dq_tuned,
            blocks_dq,
            (tq, "m"),
            b * h,
            (
                q,
                k,
                v,
                bias_tensor,
                kb,
                do,
                lse,
                delta,
                dq,
                partial,
                *strides,
                h,
                h // hkv,
                *shape[1:],
                dtab_blocks,
                sm_scale,
                spec.pos_scale,
            ),
            consts,
        )
        dbias = None
        if spec.kind == T5 and ctx.needs_input_grad[3]:
            # (B*H, blocks, buckets) -> (buckets, H): a fixed-order reduction, deterministic.
            dbias = partial.view(b, h, dtab_blocks, spec.num_buckets).sum(dim=(0, 2)).t().to(bias_tensor.dtype)
        if spec.kind == ROW_LEARNED and ctx.needs_input_grad[3]:
            dbias = partial.to(bias_tensor.dtype)
        dkey = dkb.to(kb_dtype) if kb_dtype and ctx.needs_input_grad[4] else None  # (B, H, Tk)
        return dq, dk, dv, dbias, dkey, None, None


def fused_attention(q, k, v, spec: BiasSpec, blocks_fwd=None, blocks_bwd=None, blocks_dq=None) -> torch.Tensor:
    """Differentiable fused causal attention with ``spec``'s bias (inputs already checked).
    ``blocks_*`` pin (BLOCK_M, BLOCK_N, warps, stages): ``blocks_bwd`` both backward kernels unless
    ``blocks_dq`` pins dQ's; what is not pinned comes from ``choose_blocks``."""
    arch = None if INTERPRETED else device_arch(q.device)
    name, d = spec.tuning_name(), q.shape[-1]
    blocks = (
        blocks_fwd or choose_blocks("fwd", arch, q.dtype, d, name),
        blocks_bwd or choose_blocks("dkdv", arch, q.dtype, d, name),
        blocks_dq or blocks_bwd or choose_blocks("dq", arch, q.dtype, d, name),
    )
    return _FusedAttention.apply(q, k, v, spec.tensor, spec.key_bias, spec, blocks)

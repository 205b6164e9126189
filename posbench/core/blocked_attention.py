"""Causal attention with a bias that never stores an L x L square (FlashAttention's algorithm in
plain PyTorch ops, for a CPU and any device without a fused kernel).

The queries are cut into blocks of ``rows`` rows. A block ending at query row r1 sees the keys
before r1 + (Tk - Tq) only, so the causal upper triangle is skipped block by block; within a
block the scores against all its keys fit at once (a row block: the exact softmax, no online
rescaling needed). Forward keeps q, k, v, the output and the log-sum-exp of each row; backward
recomputes each block's scores and probabilities instead of saving them (``BlockedBiasAttention``,
a ``torch.autograd.Function``). Nothing of size (B, H, Tq, Tk) is kept: the largest tensor alive is
one block's (B, H, rows, keys).

The bias tile of a block comes from a ``source``:

- ``DistanceRow``: a bias that is a function of the distance i - j alone (ALiBi, T5, KERPLE) at
  consecutive integer positions is a Toeplitz matrix, given entirely by one row: the last query's
  bias against every key, ``bias(k_pos[-1:], k_pos)`` (H, Tk). A tile is a strided view of that
  row (no copy), and the row's gradient is the sum of the tiles' gradients along their
  diagonals. T5's table gradient flows through that row, once per forward.
- ``DenseBias``: any other bias (FIRE, plugins, float positions), built once per forward as
  (H, Tq, Tk) and shared by the layers, each tile a view of it: the bias's square stays (one per
  forward, as before), the layers' B x H x L x L probabilities are no longer saved.
- ``BiasTiles``: a bias cheap to build block by block (a plugin's opt-in): each tile is
  ``masked_bias(q_pos[block], k_pos[:keys])``, and backward builds it again under autograd to
  take the gradient of the method's parameters; no square at all, but the bias is built in every
  layer, forward and backward (FIRE's MLP that way measured several times slower).

Both work with the query rows of a block in reverse order: then the Toeplitz tile's two strides
are +1 (with rows in order, one of them would be -1, which a strided view cannot have). The
reversal costs a (B, H, rows, hd) copy of q and of the output per block, nothing of the square.

Scores, softmax and the bias are computed in float32 (float64 for float64 inputs), whatever the
dtype of q, k, v: the bias stays exact in half-precision training.
"""
from __future__ import annotations

import math

import torch

BLOCK_ROWS = 64  # rows per query block: 64 beat 128 and 256 at L 256 and 2048 on a CPU (docs/kernels.md)


def _cpu_flash_with_mask():
    """PyTorch's CPU flash-attention op when it takes an ``attn_mask`` beside ``is_causal`` (torch
    2.3 on), else None. Public SDPA refuses a mask with ``is_causal=True``; this op applies both:
    the causal blocks are skipped and each tile adds the mask, read with stride 0 along
    broadcast dimensions (a (1, H, 1, Tk) mask costs one row per head, not a square)."""
    try:
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    except (AttributeError, RuntimeError):
        return None
    return op if "attn_mask" in str(op.default._schema) else None


CPU_FLASH_WITH_MASK = _cpu_flash_with_mask()


def flash_here(device) -> bool:
    """Whether attention on ``device`` goes through ``CPU_FLASH_WITH_MASK``: a CPU, with the op."""
    return CPU_FLASH_WITH_MASK is not None and torch.device(device).type == "cpu"


def block_softmax(qb, kb, vb, tile) -> tuple[torch.Tensor, torch.Tensor]:
    """One query block's attention: qb (B, H, n, hd) already scaled, kb, vb (B, H, nk, hd), tile
    (h, n, nk) the bias with -inf on future keys -> (softmax(qb kb^T + tile) vb (B, H, n, hd),
    its log-sum-exp per row (B, H, n)). On a CPU, PyTorch's flash op with the tile as its mask
    (the tile may be a strided view; it is read, never copied): at L 2048 a layer's training
    forward with a T5 distance row took 20.1 ms this way and 26 ms with the passes below, causal
    SDPA 19.1 ms (docs/kernels.md). Elsewhere, or without the op, the same in plain ops."""
    if flash_here(qb.device):
        return CPU_FLASH_WITH_MASK(qb, kb, vb, 0.0, False, attn_mask=tile[None], scale=1.0)
    s = torch.matmul(qb, kb.transpose(-1, -2)).add_(tile)  # (B, H, n, nk)
    m = s.amax(-1, keepdim=True)
    s.sub_(m).exp_()
    denom = s.sum(-1, keepdim=True)
    return torch.matmul(s, vb).div_(denom), m.add_(denom.log_()).squeeze(-1)


class DistanceRow:
    """Tiles of a bias that depends on the distance between query and key only, from one row
    (h, Tk): ``row[t]`` is the bias at distance Tk - 1 - t. The future keys read -inf from a pad."""

    def __init__(self, row: torch.Tensor, tk: int, rows: int, dtype: torch.dtype):
        self.tk = tk
        pad = row.new_full((row.shape[0], rows - 1), float("-inf"), dtype=dtype)
        self.padded = torch.cat([row.detach().to(dtype), pad], 1)  # (h, Tk + rows - 1)
        self.heads = row.shape[0]
        self.grad: torch.Tensor | None = None

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        """(h, n, nk): the bias of query rows r0 .. r0+n (reversed) against keys 0 .. nk.
        Reversed row i', key j: distance nk - 1 - i' - j, i.e. ``row[Tk - nk + i' + j]``."""
        p = self.padded
        return p.as_strided((p.shape[0], n, nk), (p.stride(0), 1, 1), p.storage_offset() + self.tk - nk)

    backward_tile = tile  # backward reads the same view

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor) -> None:
        if self.grad is None:
            self.grad = torch.zeros_like(self.padded)
        start = self.tk - nk
        self.grad[:, start:start + n + nk - 1] += antidiagonal_sums(dtile)

    def grads(self) -> tuple:
        return (None if self.grad is None else self.grad[:, : self.tk],)


class DenseBias:
    """Tiles sliced from a bias built once per forward (h, Tq, Tk), future keys -inf: for a bias
    that is neither a function of the distance nor cheap to build block by block (FIRE's MLP).
    The square of the bias (and of its gradient) is kept, once per forward for every layer; the
    probabilities of each layer are not."""

    def __init__(self, bias: torch.Tensor, dtype: torch.dtype):
        self.rev = bias.detach().to(dtype).flip(-2)  # (h, Tq, Tk), rows reversed once per call
        self.heads, self.tq = bias.shape[0], bias.shape[1]
        self.grad: torch.Tensor | None = None

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        return self.rev[:, self.tq - r0 - n:self.tq - r0, :nk]  # rows r0+n-1 .. r0: a view

    backward_tile = tile

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor) -> None:
        if self.grad is None:
            self.grad = torch.zeros_like(self.rev)
        self.grad[:, self.tq - r0 - n:self.tq - r0, :nk] += dtile

    def grads(self) -> tuple:
        return (None if self.grad is None else self.grad.flip(-2),)


class BiasTiles:
    """Tiles built by a callable ``tile_fn(r0, n, nk) -> (h, n, nk)`` (rows in order, future
    keys -inf) from ``inputs`` (the tensors it depends on: the method's parameters); backward
    builds each tile again under autograd and takes the inputs' gradients."""

    def __init__(self, tile_fn, inputs: tuple, dtype: torch.dtype):
        self.tile_fn, self.inputs, self.dtype = tile_fn, inputs, dtype
        self.acc: list[torch.Tensor | None] = [None] * len(inputs)
        self.heads = 1
        self._graph: torch.Tensor | None = None  # the tile backward built under autograd

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        t = self.tile_fn(r0, n, nk)
        t = t.reshape(-1, *t.shape[-2:]).to(self.dtype).flip(-2)  # (h, n, nk), rows reversed
        self.heads = t.shape[0]
        return t

    def backward_tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        """The tile, built once under autograd: its values for the probabilities, its graph for
        ``backward``."""
        with torch.enable_grad():
            t = self.tile(r0, n, nk)
        self._graph = t if t.requires_grad else None
        return t.detach()

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor) -> None:
        t, self._graph = self._graph, None
        wanted = [i for i, x in enumerate(self.inputs) if x.requires_grad]
        if t is None or not wanted:
            return
        grads = torch.autograd.grad(t, [self.inputs[i] for i in wanted], dtile.to(t.dtype), allow_unused=True,
                                    retain_graph=True)  # a tile may share a graph with others (tests)
        for i, g in zip(wanted, grads):
            if g is not None:
                self.acc[i] = g if self.acc[i] is None else self.acc[i] + g

    def grads(self) -> tuple:
        return tuple(self.acc)


def antidiagonal_sums(m: torch.Tensor) -> torch.Tensor:
    """(h, n, c) -> (h, n + c - 1): ``out[:, u] = sum over i + j = u of m[:, i, j]``.

    A skewed strided view: copy m into a buffer padded with n - 1 zeros on the left of each row;
    read with a row stride one less than the buffer's, row i is shifted left by i, so column u
    of the view holds m[i, u - i] (or a zero of the pad), and a sum over the rows is the answer."""
    h, n, c = m.shape
    w = c + n - 1
    buf = m.new_empty(h, n, w)
    buf[:, :, : n - 1] = 0
    buf[:, :, n - 1:] = m
    return buf.as_strided((h, n, w), (n * w, w - 1, 1), n - 1).sum(1)


class BlockedBiasAttention(torch.autograd.Function):
    """softmax(q k^T / sqrt(hd) + bias) v, causal (bottom-right aligned), by query blocks; see the
    module docstring. ``inputs``: the tensors the source's tiles depend on (their gradients)."""

    @staticmethod
    def forward(ctx, q, k, v, source, rows, *inputs):
        with torch.autocast(q.device.type, enabled=False):  # scores stay float32 under autocast
            return BlockedBiasAttention._forward(ctx, q, k, v, source, rows, inputs)

    @staticmethod
    def _forward(ctx, q, k, v, source, rows, inputs):
        b, h, tq, hd = q.shape
        tk = k.shape[-2]
        cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
        qs = q.to(cdt) * (1.0 / math.sqrt(hd))  # (B, H, Tq, hd): scaling q is cheaper than the scores
        kc, vc = k.to(cdt), v.to(cdt)
        out = torch.empty(b, h, tq, v.shape[-1], dtype=cdt, device=q.device)
        lse = torch.empty(b, h, tq, dtype=cdt, device=q.device)  # log-sum-exp, reversed within blocks
        for r0 in range(0, tq, rows):
            n = min(rows, tq - r0)
            nk = r0 + n + tk - tq
            o, lse[:, :, r0:r0 + n] = block_softmax(qs[:, :, r0:r0 + n].flip(-2), kc[:, :, :nk], vc[:, :, :nk],
                                                    source.tile(r0, n, nk))
            out[:, :, r0:r0 + n] = o.flip(-2)
        ctx.source, ctx.rows, ctx.n_inputs = source, rows, len(inputs)
        ctx.save_for_backward(qs, kc, vc, out, lse)
        return out.to(v.dtype)

    @staticmethod
    def backward(ctx, dout):
        with torch.autocast(dout.device.type, enabled=False):
            return BlockedBiasAttention._backward(ctx, dout)

    @staticmethod
    def _backward(ctx, dout):
        qs, kc, vc, out, lse = ctx.saved_tensors
        source, rows = ctx.source, ctx.rows
        b, h, tq, hd = qs.shape
        tk = kc.shape[-2]
        do = dout.to(qs.dtype)
        delta = (do * out).sum(-1, keepdim=True)  # (B, H, Tq, 1): rowsum(dP * P) = rowsum(dO * O)
        dq = torch.empty_like(qs)
        dk, dv = torch.zeros_like(kc), torch.zeros_like(vc)
        for r0 in range(0, tq, rows):
            n = min(rows, tq - r0)
            nk = r0 + n + tk - tq
            qb, dob = qs[:, :, r0:r0 + n].flip(-2), do[:, :, r0:r0 + n].flip(-2)  # (B, H, n, hd)
            k_blk, v_blk = kc[:, :, :nk], vc[:, :, :nk]
            p = torch.matmul(qb, k_blk.transpose(-1, -2))  # (B, H, n, nk): scores, then probabilities
            p.add_(source.backward_tile(r0, n, nk)).sub_(lse[:, :, r0:r0 + n, None]).exp_()
            dv[:, :, :nk] += torch.matmul(p.transpose(-1, -2), dob)
            ds = torch.matmul(dob, v_blk.transpose(-1, -2))  # dP, then dS = P (dP - delta)
            ds.sub_(delta[:, :, r0:r0 + n].flip(-2)).mul_(p)
            dq[:, :, r0:r0 + n] = torch.matmul(ds, k_blk).flip(-2)
            dk[:, :, :nk] += torch.matmul(ds.transpose(-1, -2), qb)
            if ctx.n_inputs and any(ctx.needs_input_grad[5:]):
                dtile = _batch_sum(ds)  # (H, n, nk): the bias is shared by the batch
                if source.heads == 1:  # one bias for every head
                    dtile = dtile.sum(0, keepdim=True)
                source.backward(r0, n, nk, dtile)
        scale = 1.0 / math.sqrt(hd)
        dq.mul_(scale)  # the scores were (q * scale) k^T; dk came from the scaled q already
        grads = source.grads() if ctx.n_inputs else ()
        return (dq.to(dout.dtype), dk.to(dout.dtype), dv.to(dout.dtype), None, None, *grads)


def _batch_sum(ds: torch.Tensor) -> torch.Tensor:
    """(B, H, n, nk) -> (H, n, nk), the sum over the batch: a view at B 1, else adds of the batch
    rows (at B 2 half the time of ``ds.sum(0)``, which at B 1 still costs a pass over the tile)."""
    if ds.shape[0] == 1:
        return ds[0]
    out = ds[0].clone()
    for i in range(1, ds.shape[0]):
        out.add_(ds[i])
    return out


def blocked_bias_attention(q, k, v, source, inputs: tuple = (), rows: int = BLOCK_ROWS) -> torch.Tensor:
    """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd), with the bias tiles of ``source``
    (``DistanceRow``, ``DenseBias``, ``BiasTiles``, ``PiecewiseRatio``) and ``inputs`` the tensors
    those tiles depend on. Without autograd (a prefill, an evaluation) it runs ``forward_only``."""
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (q, k, v, *inputs)):
        with torch.autocast(q.device.type, enabled=False):
            return forward_only(q, k, v, source, rows)
    return BlockedBiasAttention.apply(q, k, v, source, rows, *inputs)


def forward_only(q, k, v, source, rows: int) -> torch.Tensor:
    """The blocked forward with nothing kept for backward (a prefill, an evaluation). On a CPU each
    block is ``block_softmax``'s flash op. Elsewhere one batch row at a time: the scores of one
    row, (H, n, nk), stay in cache through ``baddbmm`` (the bias tile written with the scores, no
    pass of its own), one fused ``torch.softmax`` (no log-sum-exp to keep) and the product with
    v; at C 4096, B 8 that took 1.32x causal SDPA's time per call where the training forward's
    passes over (B, H, n, nk) took 1.88x (docs/kernels.md)."""
    b, h, tq, hd = q.shape
    tk = k.shape[-2]
    cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
    qs = q.to(cdt) * (1.0 / math.sqrt(hd))  # (B, H, Tq, hd)
    kc, vc = k.to(cdt), v.to(cdt)  # (B, H, Tk, hd)
    flash = flash_here(q.device)
    out = torch.empty(b, h, tq, v.shape[-1], dtype=cdt, device=q.device)
    for r0 in range(0, tq, rows):
        n = min(rows, tq - r0)
        nk = r0 + n + tk - tq
        tile = source.tile(r0, n, nk)  # (h, n, nk), rows reversed
        qb = qs[:, :, r0:r0 + n].flip(-2)  # (B, H, n, hd)
        if flash:
            out[:, :, r0:r0 + n] = block_softmax(qb, kc[:, :, :nk], vc[:, :, :nk], tile)[0].flip(-2)
            continue
        for i in range(b):
            s = torch.baddbmm(tile, qb[i], kc[i, :, :nk].transpose(-1, -2))  # (H, n, nk): bias + scores
            out[i, :, r0:r0 + n] = torch.bmm(torch.softmax(s, -1), vc[i, :, :nk]).flip(-2)
    return out.to(v.dtype)


def linear_bias_sdpa(q, k, v, slopes: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
    """Causal attention with ALiBi's bias -m_h (p_i - p_j) through PyTorch's flash kernel with the
    causal upper triangle skipped and no probabilities stored, Tq == Tk.

    softmax_j(s_ij - m p_i + m p_j) = softmax_j(s_ij + m (p_j - p_mid)): the -m p_i term (and any
    constant p_mid) is the same for every key of row i and cancels, so the bias is one number per
    head and key. On a CPU it goes to the flash kernel as a (1, H, 1, Tk) mask beside
    ``is_causal`` (``key_bias_flash``); elsewhere, or without that op, as one extra head dimension
    (``head_column_sdpa``). Exact in exact arithmetic; in floating point the score
    s + m (p_j - p_mid) is rounded at the magnitude of m * L / 2 (float32 at L 2048, m 1/2:
    ~2e-5 off the float64 output where the blocked path is ~5e-7;
    tests/core/test_blocked_attention.py), which is why this path is taken in float32 and float64
    only: in bfloat16 or float16 that rounding (8 or 11 bits at a magnitude of ~1000) would wreck
    the scores.
    """
    # Relative to the middle key: |m (p_j - p_mid)| <= m L / 2, half the rounding of p_last.
    rel = (k_pos - k_pos[k_pos.shape[0] // 2]).to(q.dtype)  # (Tk,): exact for integer positions
    key_bias = slopes.to(q.dtype)[:, None] * rel[None, :]  # (H, Tk)
    if flash_here(q.device):
        return key_bias_flash(q, k, v, key_bias)
    return head_column_sdpa(q, k, v, key_bias)


def key_bias_flash(q, k, v, key_bias: torch.Tensor) -> torch.Tensor:
    """q, k, v (B, H, L, hd), key_bias (H, L): causal softmax(q k^T / sqrt(hd) + key_bias[h, j]) v
    by the CPU flash op with a broadcast mask. Measured at L 2048, 4 heads of 32, forward +
    backward, one thread: 1.03x plain causal SDPA, where the head column took 1.20x
    (docs/kernels.md)."""
    mask = key_bias.contiguous()[None, :, None, :]  # (1, H, 1, L): stride 0 over batch and rows
    return CPU_FLASH_WITH_MASK(q, k, v, 0.0, True, attn_mask=mask, scale=1.0 / math.sqrt(q.shape[-1]))[0]


def head_column_sdpa(q, k, v, key_bias: torch.Tensor) -> torch.Tensor:
    """The same attention as ``key_bias_flash`` through public SDPA: q' = [q, 1],
    k' = [k, key_bias / scale], so scale * q'.k' = scale * q.k + key_bias (head dim hd + 1,
    which PyTorch's CPU flash kernel runs at 1.14x the time of hd)."""
    b, h, tq, hd = q.shape
    scale = 1.0 / math.sqrt(hd)
    kx = key_bias * (1.0 / scale)  # (H, Tk)
    qa = torch.cat([q, q.new_ones(b, h, tq, 1)], -1)  # (B, H, Tq, hd + 1)
    ka = torch.cat([k, kx.expand(b, h, -1)[..., None]], -1)
    # v gets a zero column too: PyTorch's CPU flash kernel wants one head dimension for q, k, v
    # (with v's 32 against q's 33 SDPA falls back to its math path, which saves B x H x L x L).
    va = torch.cat([v, v.new_zeros(b, h, v.shape[-2], 1)], -1)
    return torch.nn.functional.scaled_dot_product_attention(qa, ka, va, is_causal=True, scale=scale)[..., :-1]

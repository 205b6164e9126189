"""posbench.attention (blocked.py, tiles.py, linear.py): attention with a bias by query blocks (no L x L square), and
ALiBi as flash attention with a per-key mask (or one extra head dimension), against a plain float64 reference on random inputs:
several seeds, odd lengths, Tq < Tk, float32 and half dtypes, outputs and every gradient."""

import math

import pytest
import torch

from posbench.attention import linear, routes
from posbench.attention.blocked import blocked_bias_attention, forward_only, window_start
from posbench.attention.linear import head_column_sdpa, linear_bias_sdpa
from posbench.attention.tiles import BiasTiles, DenseBias, DistanceRow, antidiagonal_sums
from posbench.core import cpu_flash, registry
from posbench.core.alibi_math import slopes_tensor
from posbench.core.masked import biased_attention, causal_attention, causal_mask, mask_bias, windowed
from posbench.core.method import ModelConfig

# Scores and softmax are float32 whatever q's dtype; half inputs round q, k, v and the output.
TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 5e-3}


def reference(q, k, v, bias):
    """float64 softmax(q k^T / sqrt(hd) + bias, causal bottom-right) v; bias (h, Tq, Tk)."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()
    scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], "cpu"), float("-inf"))
    return torch.softmax(scores, -1) @ v


def inputs(seed, b, h, tq, tk, hd, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, hd, generator=g)
    k, v = (torch.randn(b, h, tk, hd, generator=g) for _ in range(2))
    by_distance = torch.randn(h, tk, generator=g)  # (h, Tk): the bias at distance d is [:, d]
    return [x.to(dtype).requires_grad_() for x in (q, k, v)] + [by_distance.requires_grad_()]


def distance_bias(by_distance, tq, tk):
    """(h, Tq, Tk) gathered from the per-distance values (future keys read distance 0, masked)."""
    pos = torch.arange(tk)
    return by_distance[:, (pos[-tq:, None] - pos[None, :]).clamp(min=0)]


def close(got, want, dtype, what):
    scale = max(1.0, want.abs().max().item())
    err = (got.double() - want).abs().max().item() / scale
    assert err <= TOL[dtype], f"{what}: {err:.3g} of its scale (tolerance {TOL[dtype]:g})"


@pytest.mark.usefixtures("block_kernel")
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "tq, tk, rows", [(1, 1, 4), (7, 7, 4), (33, 33, 8), (100, 100, 16), (5, 13, 2), (257, 257, 64), (1, 9, 4), (40, 41, 128)]
)
@pytest.mark.parametrize("source", ["distance", "tiles", "dense"])
@pytest.mark.parametrize("batch", [1, 2, 3])  # the bias's gradient sums the batch (a view at batch 1)
def test_blocked_attention_equals_the_float64_reference_with_every_gradient(seed, tq, tk, rows, source, batch):
    dtype = torch.float32
    q, k, v, by_distance = inputs(seed, batch, 3, tq, tk, 16, dtype)
    want = reference(q, k, v, distance_bias(by_distance, tq, tk))
    grad_out = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64)
    wants = torch.autograd.grad(want, (q, k, v, by_distance), grad_out)
    if source == "distance":
        row = by_distance.flip(-1)  # row[t]: the bias at distance Tk - 1 - t
        out = blocked_bias_attention(q, k, v, DistanceRow(row, tk, rows, torch.float32), (row,), rows)
    elif source == "dense":
        masked = distance_bias(by_distance, tq, tk).masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
        out = blocked_bias_attention(q, k, v, DenseBias(masked, torch.float32), (masked,), rows)
    else:

        def tile(r0, n, nk):  # rows r0 .. r0+n, keys 0 .. nk, future keys -inf
            b = distance_bias(by_distance, tq, tk)[:, r0 : r0 + n, :nk]
            return b.masked_fill(~causal_mask(n, nk, "cpu"), float("-inf"))

        out = blocked_bias_attention(q, k, v, BiasTiles(tile, (by_distance,), torch.float32), (by_distance,), rows)
    gots = torch.autograd.grad(out, (q, k, v, by_distance), grad_out.float())
    close(out, want, dtype, "output")
    for name, got, w in zip(("dq", "dk", "dv", "dbias"), gots, wants):
        close(got, w, dtype, name)


@pytest.mark.usefixtures("block_kernel")
@pytest.mark.parametrize("seed, tq, tk, rows", [(0, 33, 33, 8), (1, 5, 13, 2), (2, 100, 100, 16), (3, 1, 9, 4)])
@pytest.mark.parametrize("source", ["distance", "dense", "tiles"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_forward_without_autograd_equals_the_float64_reference(seed, tq, tk, rows, source, dtype):
    """``forward_only`` (batch row by batch row, fused softmax, no log-sum-exp): what a prefill or an
    evaluation runs, with no input requiring a gradient or under no_grad."""
    q, k, v, by_distance = inputs(seed, 3, 2, tq, tk, 16, dtype)
    bias = distance_bias(by_distance, tq, tk).detach()
    want = reference(q, k, v, bias)
    masked = bias.masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
    sources = {
        "distance": lambda: DistanceRow(by_distance.flip(-1), tk, rows, torch.float32),
        "dense": lambda: DenseBias(masked, torch.float32),
        "tiles": lambda: BiasTiles(lambda r0, n, nk: masked[:, r0 : r0 + n, :nk], (), torch.float32),
    }
    with torch.no_grad():
        got = blocked_bias_attention(q, k, v, sources[source](), (by_distance,), rows)
    assert got.dtype == dtype
    close(got, want, dtype, "output")
    close(forward_only(q.detach(), k.detach(), v.detach(), sources[source](), rows), want, dtype, "output")


@pytest.mark.usefixtures("block_kernel")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_blocked_attention_in_half_precision_computes_scores_in_float32(dtype):
    q, k, v, by_distance = inputs(3, 1, 2, 70, 75, 32, dtype)
    want = reference(q, k, v, distance_bias(by_distance, 70, 75))
    row = by_distance.flip(-1)
    out = blocked_bias_attention(q, k, v, DistanceRow(row, 75, 16, torch.float32), (row,), 16)
    assert out.dtype == dtype
    close(out, want, dtype, "output")
    grad_out = torch.randn(want.shape, dtype=torch.float64)
    got = torch.autograd.grad(out, (q, k, v, by_distance), grad_out.to(dtype))
    for name, g, w in zip(("dq", "dk", "dv", "dbias"), got, torch.autograd.grad(want, (q, k, v, by_distance), grad_out)):
        close(g, w, dtype, name)


@pytest.mark.usefixtures("block_kernel")
def test_a_bias_shared_by_the_heads_gets_one_gradient():
    q, k, v, by_distance = inputs(4, 2, 3, 20, 20, 8, torch.float32)
    shared = by_distance[:1].detach().requires_grad_()  # (1, Tk): every head the same bias
    want = reference(q, k, v, distance_bias(shared, 20, 20))
    row = shared.flip(-1)
    out = blocked_bias_attention(q, k, v, DistanceRow(row, 20, 8, torch.float32), (row,), 8)
    close(out, want, torch.float32, "output")
    (got,) = torch.autograd.grad(out.sum(), shared)
    (w,) = torch.autograd.grad(want.sum(), shared)
    close(got, w, torch.float32, "dbias")


@pytest.mark.parametrize("n, c", [(1, 1), (3, 5), (8, 8), (6, 2)])
def test_antidiagonal_sums_add_each_antidiagonal(n, c):
    m = torch.randn(2, n, c)
    want = torch.zeros(2, n + c - 1)
    for i in range(n):
        for j in range(c):
            want[:, i + j] += m[:, i, j]
    torch.testing.assert_close(antidiagonal_sums(m), want)


def test_antidiagonal_sums_compiles_as_one_opaque_op_equal_to_eager():
    m = torch.randn(4, 5, 9)
    compiled = torch.compile(lambda x: antidiagonal_sums(x) * 2, fullgraph=True)
    torch.testing.assert_close(compiled(m), antidiagonal_sums(m) * 2)


def alibi_reference(q, k, v, slopes, pos):
    bias = -slopes.double()[:, None, None] * (pos.double()[:, None] - pos.double()[None, :])
    return reference(q, k, v, bias)


def head_column(q, k, v, slopes, pos):
    """linear_bias_sdpa's other path (devices without the CPU flash op): one extra head dimension."""
    rel = (pos - pos[pos.shape[0] // 2]).to(q.dtype)
    return head_column_sdpa(q, k, v, slopes.to(q.dtype)[:, None] * rel[None, :])


def test_alibi_on_a_cpu_takes_the_flash_op_with_a_per_key_mask(monkeypatch):
    """torch 2.13's CPU flash op takes a mask beside is_causal; linear_bias_sdpa must use it (the
    head column costs 1.14x at head dim 33) and must give the head column's output when it is absent."""
    assert cpu_flash.CPU_FLASH_WITH_MASK is not None
    q, k, v, _ = inputs(7, 2, 4, 65, 65, 32, torch.float32)
    slopes, pos = slopes_tensor(4), torch.arange(65)
    calls = []
    real = linear.key_bias_flash
    monkeypatch.setattr(linear, "key_bias_flash", lambda *a: calls.append(1) or real(*a))
    with torch.no_grad():
        flash = linear_bias_sdpa(q, k, v, slopes, pos)
        assert calls == [1]
        monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", None)
        column = linear_bias_sdpa(q, k, v, slopes, pos)
    assert calls == [1]
    torch.testing.assert_close(flash, column, atol=2e-5, rtol=0)
    torch.testing.assert_close(column, head_column(q, k, v, slopes, pos), atol=0, rtol=0)


@pytest.mark.parametrize("path", [linear_bias_sdpa, head_column])
@pytest.mark.parametrize(
    "seed, length, pos_scale, dtype",
    [
        (0, 7, 1, torch.float32),
        (1, 100, 1, torch.float32),
        (2, 257, 1, torch.float32),
        (3, 64, 0.37, torch.float32),
        (4, 131, 1, torch.float64),
    ],
)
def test_alibi_as_sdpa_with_a_key_bias_equals_the_reference(path, seed, length, pos_scale, dtype):
    q, k, v, _ = inputs(seed, 2, 4, length, length, 32, dtype)
    slopes = slopes_tensor(4)
    pos = torch.arange(length) if pos_scale == 1 else torch.arange(length) * pos_scale  # float: interpolated
    want = alibi_reference(q, k, v, slopes, pos)
    out = path(q, k, v, slopes, pos)
    if dtype == torch.float64:
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)
        for g, w in zip(
            torch.autograd.grad(out, (q, k, v), torch.ones_like(out)), torch.autograd.grad(want, (q, k, v), torch.ones_like(want))
        ):
            torch.testing.assert_close(g, w, atol=1e-12, rtol=0)
        return
    close(out, want, torch.float32, "output")
    grad_out = torch.randn(want.shape, dtype=torch.float64)
    for name, g, w in zip(
        ("dq", "dk", "dv"), torch.autograd.grad(out, (q, k, v), grad_out.float()), torch.autograd.grad(want, (q, k, v), grad_out)
    ):
        close(g, w, torch.float32, name)


@pytest.mark.parametrize("path", [linear_bias_sdpa, head_column])
def test_alibi_as_sdpa_rounds_scores_at_the_magnitude_of_slope_times_length(path):
    """The reason the linear plan stops at LINEAR_SPAN and is never taken in half precision: its
    error grows with m * L (here L 1024, m 1/2: measured ~1.5e-5; 2048: ~3e-5), where the
    blocked path stays at float32's rounding of the softmax."""
    q, k, v, by_distance = inputs(5, 1, 2, 1024, 1024, 32, torch.float32)
    slopes = torch.tensor([0.5, 0.125])
    pos = torch.arange(1024)
    with torch.no_grad():
        want = alibi_reference(q, k, v, slopes, pos)
        linear = (path(q, k, v, slopes, pos).double() - want).abs().max().item()
        row = (-slopes[:, None] * torch.arange(1023, -1, -1)[None]).float()  # the bias at distance 1023 - t
        blocked = blocked_bias_attention(q, k, v, DistanceRow(row, 1024, 128, torch.float32), (), 128)
        blocked = (blocked.double() - want).abs().max().item()
    assert linear <= 1e-4 and blocked <= 2e-6
    assert linear > blocked


def test_on_a_cpu_every_block_goes_through_the_flash_op_with_its_tile_as_the_mask(monkeypatch):
    """Training forward and forward-only: one flash call per query block, its mask the block's
    bias tile (h, n, nk) read in place, the block's keys only (the causal upper triangle skipped)."""
    real, calls = cpu_flash.CPU_FLASH_WITH_MASK, []

    def counting(qb, kb, vb, dropout, causal, attn_mask, scale):
        calls.append((qb.shape[-2], kb.shape[-2], tuple(attn_mask.shape), causal))
        return real(qb, kb, vb, dropout, causal, attn_mask=attn_mask, scale=scale)

    monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", counting)
    q, k, v, by_distance = inputs(3, 2, 3, 20, 20, 8, torch.float32)
    row = by_distance.flip(-1)
    blocked_bias_attention(q, k, v, DistanceRow(row, 20, 8, torch.float32), (row,), 8).sum().backward()
    with torch.no_grad():
        blocked_bias_attention(q, k, v, DistanceRow(row, 20, 8, torch.float32), (), 8)
    per_pass = [(8, 8, (1, 3, 8, 8), False), (8, 16, (1, 3, 8, 16), False), (4, 20, (1, 3, 4, 20), False)]
    assert calls == per_pass * 2
    assert by_distance.grad is not None and by_distance.grad.abs().sum() > 0


# --------------------------------------------------------------------------------------------------
# Sliding-window attention in every attend path (issue 40): the masked reference and SDPA
# (posbench/core/masked.py), the blocked tiles (blocked.py: key blocks outside the window skipped,
# with every gradient), the linear plan, the distance / piecewise / dense / tiles plans, FlexRoute's
# window block mask, against a plain float64 softmax with keys older than the window masked: several
# seeds, odd lengths, Tq < Tk, float32 and bfloat16.

WINDOW_TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}
H, HD = 4, 8


def _window_reference(q, k, v, bias, window):
    """float64 softmax(q k^T / sqrt(hd) + bias) v over the keys j with i - window < j <= i
    (bottom-right aligned), written out without posbench's mask helpers."""
    q, k, v = q.double(), k.double(), v.double()
    tq, tk = q.shape[-2], k.shape[-2]
    i = torch.arange(tk - tq, tk)[:, None]
    j = torch.arange(tk)[None, :]
    visible = (j <= i) & (j > i - window)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v


def _window_close(got, want, dtype, what):
    scale = max(1.0, want.abs().max().item())
    err = (got.double() - want).abs().max().item() / scale
    assert err <= WINDOW_TOL[dtype], f"{what}: {err:.3g} of its scale (tolerance {WINDOW_TOL[dtype]:g})"


def qkv(seed, b, h, tq, tk, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, HD, generator=g)
    k, v = (torch.randn(b, h, tk, HD, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_() for x in (q, k, v)]


def test_the_window_mask_is_the_last_window_keys_of_each_query():
    mask = causal_mask(4, 6, "cpu", window=3)  # queries at key indices 2..5
    assert mask.tolist() == [
        [True, True, True, False, False, False],
        [False, True, True, True, False, False],
        [False, False, True, True, True, False],
        [False, False, False, True, True, True],
    ]
    assert torch.equal(causal_mask(5, 5, "cpu", window=5), causal_mask(5, 5, "cpu"))  # nothing older than 5 keys
    assert windowed(6, 5) and not windowed(5, 5) and not windowed(6, None)
    assert window_start(0, 10, 10, 4) == 0 and window_start(8, 10, 10, 4) == 5 and window_start(8, 10, 10, None) == 0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tq, tk, window", [(37, 37, 9), (1, 29, 7), (13, 29, 5), (20, 20, 1), (11, 11, 30)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_masked_reference_and_sdpa_paths_take_the_window(seed, tq, tk, window, dtype):
    q, k, v = (x.detach() for x in qkv(seed, 2, H, tq, tk, dtype))
    bias = torch.randn(H, tq, tk, generator=torch.Generator().manual_seed(seed + 9))
    want_plain, want_bias = _window_reference(q, k, v, torch.zeros(1), window), _window_reference(q, k, v, bias, window)
    _window_close(causal_attention(q, k, v, window=window), want_plain, dtype, "sdpa, no bias")
    _window_close(causal_attention(q, k, v, bias.to(dtype), window=window), want_bias, dtype, "sdpa, bias")
    _window_close(causal_attention(q, k, v, bias, window=window), want_bias, dtype, "explicit float32 bias")
    _window_close(causal_attention(q, k, v, mask_bias(bias), masked=True, window=window), want_bias, dtype, "masked bias")
    _window_close(biased_attention(q, k, v, mask_bias(bias, window)), want_bias, dtype, "mask_bias with the window")
    _window_close(biased_attention(q, k, v, mask_bias(bias), window), want_bias, dtype, "biased_attention")


@pytest.mark.usefixtures("block_kernel")
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(
    "tq, tk, rows, window",
    [(33, 33, 8, 5), (100, 100, 16, 16), (5, 13, 2, 3), (40, 41, 128, 7), (1, 9, 4, 4), (257, 257, 64, 50), (70, 70, 8, 1)],
)
@pytest.mark.parametrize("source", ["distance", "tiles", "dense"])
def test_blocked_attention_with_a_window_equals_the_reference_with_every_gradient(seed, tq, tk, rows, window, source):
    q, k, v = qkv(seed, 2, 3, tq, tk, torch.float32)
    by_distance = torch.randn(3, tk, generator=torch.Generator().manual_seed(seed + 5)).requires_grad_()
    pos = torch.arange(tk)
    by_index = (pos[-tq:, None] - pos[None, :]).clamp(min=0)  # (Tq, Tk): distances, future keys 0
    dist_bias = by_distance[:, by_index]  # (h, Tq, Tk)
    want = _window_reference(q, k, v, dist_bias, window)
    grad_out = torch.randn(want.shape, generator=torch.Generator().manual_seed(seed + 7), dtype=torch.float64)
    wants = torch.autograd.grad(want, (q, k, v, by_distance), grad_out)
    if source == "distance":
        row = by_distance.flip(-1)  # row[t]: the bias at distance Tk - 1 - t
        out = blocked_bias_attention(q, k, v, DistanceRow(row, tk, rows, torch.float32), (row,), rows, window)
    elif source == "dense":
        masked = by_distance[:, by_index].masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
        out = blocked_bias_attention(q, k, v, DenseBias(masked, torch.float32), (masked,), rows, window)
    else:

        def tile(r0, n, nk):  # rows r0 .. r0+n, keys 0 .. nk, future keys -inf (the window is blocked.py's)
            return by_distance[:, by_index[r0 : r0 + n, :nk]].masked_fill(~causal_mask(n, nk, "cpu"), float("-inf"))

        out = blocked_bias_attention(q, k, v, BiasTiles(tile, (by_distance,), torch.float32), (by_distance,), rows, window)
    gots = torch.autograd.grad(out, (q, k, v, by_distance), grad_out.float())
    _window_close(out, want, torch.float32, "output")
    for name, got, w in zip(("dq", "dk", "dv", "dbias"), gots, wants):
        _window_close(got, w, torch.float32, name)


@pytest.mark.usefixtures("block_kernel")
def test_blocked_attention_skips_the_key_blocks_outside_the_window():
    # Every tile a block reads starts at its first query's window: keys before it are never read.
    q, k, v = (x.detach() for x in qkv(0, 1, 2, 64, 64, torch.float32))
    widths = []

    class Recording(DistanceRow):
        def tile(self, r0, n, nk):
            t = super().tile(r0, n, nk)
            widths.append(nk)
            return t

    row = torch.zeros(2, 64)
    blocked_bias_attention(q, k, v, Recording(row, 64, 16, torch.float32), (), 16, window=8)
    assert widths == [16, 32, 48, 64]  # the source's tiles cover keys 0 .. nk ...
    out = blocked_bias_attention(q, k, v, DistanceRow(row, 64, 16, torch.float32), (), 16, window=8)
    k_far = k.clone()
    k_far[:, :, :40] = float("nan")  # ... yet the last block (queries 48..63, window 8) reads keys from 41 on only
    v_far = v.clone()
    v_far[:, :, :40] = float("nan")
    last = blocked_bias_attention(q, k_far, v_far, DistanceRow(row, 64, 16, torch.float32), (), 16, window=8)
    assert torch.equal(last[:, :, 48:], out[:, :, 48:])


def _method(name: str, seed: int, window=None):
    torch.manual_seed(seed)
    method = registry.get(name)(ModelConfig(d_model=H * HD, n_heads=H, method=name, window=window))
    with torch.no_grad():  # learned parameters away from their initial values: a real bias
        for p in method.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return method


BIAS_METHODS = ["alibi", "t5_bias", "kerple_log", "fire", "sandwich"]


def full_bias(method, q_pos, k_pos):
    """(H, Tq, Tk) float32: the method's bias, broadcast."""
    b = method.bias(q_pos, k_pos, torch.float32).detach()
    return b.reshape(-1, *b.shape[-2:]).expand(H, q_pos.shape[0], k_pos.shape[0])


def _plans(form, tq, tk):
    """The plan classes that take a bias of ``form`` at Tq, Tk (each forced, whatever choose_route picks)."""
    out = [routes.DenseRoute, routes.TilesRoute, routes.FlexRoute]
    if form.slopes is not None and tq == tk:
        out.append(routes.LinearRoute)
    if form.relative:
        out.append(routes.DistanceRoute)
    if form.pieces is not None:
        out.append(routes.PiecewiseRoute)
    return out


@pytest.mark.parametrize("name", BIAS_METHODS)
@pytest.mark.parametrize("seed, tq, tk, window", [(0, 37, 37, 9), (1, 13, 29, 6), (2, 70, 70, 64), (3, 1, 25, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_every_plan_of_every_bias_method_takes_the_window(name, seed, tq, tk, window, dtype):
    method = _method(name, seed)
    q, k, v = (x.detach() for x in qkv(seed, 2, H, tq, tk, dtype))
    k_pos = torch.arange(tk)
    q_pos = k_pos[-tq:]
    form = method.bias_form(dtype)
    want = _window_reference(q, k, v, full_bias(method, q_pos, k_pos), window)
    with torch.no_grad():
        _window_close(routes.attend(q, k, v, method.masked_bias(q_pos, k_pos, dtype), window), want, dtype, "masked bias")
        for plan in _plans(form, tq, tk):
            if plan is routes.FlexRoute and dtype != torch.float32:
                continue  # unfused FlexAttention on a CPU: float32 (test_flex.py)
            got = plan(method, form, q_pos, k_pos, dtype).attend(q, k, v, window)
            _window_close(got, want, dtype, plan.__name__)


@pytest.mark.parametrize("name", ["alibi", "t5_bias"])
def test_a_bias_method_in_a_windowed_layer_attends_within_it_and_a_global_layer_does_not(name):
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=H * HD, n_heads=H, n_layers=2, method=name, window=5, window_layers=[1])
    method = registry.get(name)(cfg)
    q, k, v = (x.detach() for x in qkv(0, 1, H, 600, 600, torch.float32))  # 600 queries: a blocked plan on a CPU
    pos = torch.arange(600)
    state = method.prepare(pos, pos, torch.float32)
    bias = full_bias(method, pos, pos)
    with torch.no_grad():
        _window_close(method.attend(q, k, v, pos, pos, 1, state), _window_reference(q, k, v, bias, 5), torch.float32, "layer 1")
        _window_close(
            method.attend(q, k, v, pos, pos, 0, state), _window_reference(q, k, v, bias, 10**6), torch.float32, "layer 0"
        )
        _window_close(
            method.attend(q, k, v, pos, pos, 1), _window_reference(q, k, v, bias, 5), torch.float32, "no state: reference"
        )

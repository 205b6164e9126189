"""Sliding-window attention in every attend path (issue 40): the masked reference and SDPA
(posbench/core/masked.py), the blocked tiles (blocked.py: key blocks outside the window skipped,
with every gradient), the linear plan, the distance / piecewise / dense / tiles plans, FlexRoute's
window block mask, against a plain float64 softmax with keys older than the window masked: several
seeds, odd lengths, Tq < Tk, float32 and bfloat16."""

import math

import pytest
import torch

from posbench.attention import routes
from posbench.attention.blocked import blocked_bias_attention, window_start
from posbench.attention.tiles import BiasTiles, DenseBias, DistanceRow
from posbench.core import registry
from posbench.core.masked import biased_attention, causal_attention, causal_mask, mask_bias, windowed
from posbench.core.method import ModelConfig

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2}
H, HD = 4, 8


def reference(q, k, v, bias, window):
    """float64 softmax(q k^T / sqrt(hd) + bias) v over the keys j with i - window < j <= i
    (bottom-right aligned), written out without posbench's mask helpers."""
    q, k, v = q.double(), k.double(), v.double()
    tq, tk = q.shape[-2], k.shape[-2]
    i = torch.arange(tk - tq, tk)[:, None]
    j = torch.arange(tk)[None, :]
    visible = (j <= i) & (j > i - window)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()
    return torch.softmax(scores.masked_fill(~visible, float("-inf")), -1) @ v


def close(got, want, dtype, what):
    scale = max(1.0, want.abs().max().item())
    err = (got.double() - want).abs().max().item() / scale
    assert err <= TOL[dtype], f"{what}: {err:.3g} of its scale (tolerance {TOL[dtype]:g})"


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
    want_plain, want_bias = reference(q, k, v, torch.zeros(1), window), reference(q, k, v, bias, window)
    close(causal_attention(q, k, v, window=window), want_plain, dtype, "sdpa, no bias")
    close(causal_attention(q, k, v, bias.to(dtype), window=window), want_bias, dtype, "sdpa, bias")
    close(causal_attention(q, k, v, bias, window=window), want_bias, dtype, "explicit float32 bias")
    close(causal_attention(q, k, v, mask_bias(bias), masked=True, window=window), want_bias, dtype, "masked bias")
    close(biased_attention(q, k, v, mask_bias(bias, window)), want_bias, dtype, "mask_bias with the window")
    close(biased_attention(q, k, v, mask_bias(bias), window), want_bias, dtype, "biased_attention")


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
    want = reference(q, k, v, dist_bias, window)
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
    close(out, want, torch.float32, "output")
    for name, got, w in zip(("dq", "dk", "dv", "dbias"), gots, wants):
        close(got, w, torch.float32, name)


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
    want = reference(q, k, v, full_bias(method, q_pos, k_pos), window)
    with torch.no_grad():
        close(routes.attend(q, k, v, method.masked_bias(q_pos, k_pos, dtype), window), want, dtype, "masked bias")
        for plan in _plans(form, tq, tk):
            if plan is routes.FlexRoute and dtype != torch.float32:
                continue  # unfused FlexAttention on a CPU: float32 (test_flex.py)
            got = plan(method, form, q_pos, k_pos, dtype).attend(q, k, v, window)
            close(got, want, dtype, plan.__name__)


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
        close(method.attend(q, k, v, pos, pos, 1, state), reference(q, k, v, bias, 5), torch.float32, "layer 1")
        close(method.attend(q, k, v, pos, pos, 0, state), reference(q, k, v, bias, 10**6), torch.float32, "layer 0")
        close(method.attend(q, k, v, pos, pos, 1), reference(q, k, v, bias, 5), torch.float32, "no state: reference")

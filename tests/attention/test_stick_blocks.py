"""Stick-breaking by blocks of keys (posbench/attention/stick_blocks.py) against the plain
reference of methods/stickbreaking.py: values, the remainder and gradients, float64 and float32,
odd lengths, decode rows, windows, the query's own key, grouped key heads."""

import pytest
import torch

from posbench.attention.stick_blocks import _segments, stick_breaking_blocks
from tests.helpers.methods import module_of

CASES = [
    # (Tq, Tk, window, attend_current, block)
    (37, 37, None, False, 8),
    (37, 41, None, True, 8),  # rows at the end of a longer key sequence
    (100, 100, 13, False, 16),  # a window shorter than a block's reach
    (1, 50, None, False, 8),  # a decode row
    (129, 129, None, False, 128),  # one key past a block
    (5, 77, 7, True, 4),  # rows at the end with a window wider than a block
    (64, 64, 3, False, 8),
    (33, 33, None, False, 128),  # one block wider than the sequence
]
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5)}


def inputs(tq, tk, dtype, seed, kv_heads=3):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 6, tq, 16, generator=g, dtype=dtype)
    k, v = (torch.randn(2, kv_heads, tk, 16, generator=g, dtype=dtype) for _ in range(2))
    return [x.requires_grad_() for x in (q, k, v)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tq,tk,window,attend_current,block", CASES)
def test_blocks_equal_the_reference_values_rest_and_gradients(dtype, tq, tk, window, attend_current, block):
    reference = module_of("stickbreaking").stick_breaking
    for seed in (0, 1):
        q, k, v = inputs(tq, tk, dtype, seed)
        # grouped key heads: the model hands attention k and v expanded to the query heads
        ke, ve = (x.repeat_interleave(2, 1) for x in (k, v))
        want = reference(q, ke, ve, window, attend_current, chunk=16)
        got = stick_breaking_blocks(q, ke, ve, window, attend_current, block)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, **TOL[dtype])
        g = torch.Generator().manual_seed(seed + 10)
        go, gr = torch.randn(want[0].shape, generator=g, dtype=dtype), torch.randn(want[1].shape, generator=g, dtype=dtype)

        def grads(out):
            return torch.autograd.grad((out[0] * go).sum() + (out[1] * gr).sum(), (q, k, v))

        for a, b in zip(grads(got), grads(want)):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, **TOL[dtype])


def test_rows_are_masked_only_where_an_edge_crosses_the_block():
    # causal, 8-key blocks: keys 8..15 are seen by rows 9.. (strict), rows 9..15 partly, 16.. wholly
    assert _segments(40, 40, 8, 16, None, False) == [(9, 16, True), (16, 40, False)]
    # with the query's own key: rows 8..14 partly (row 15 sees key 15)
    assert _segments(40, 40, 8, 16, None, True) == [(8, 15, True), (15, 40, False)]
    # window 20: row r sees keys r - 19 .. r - 1; key 8 leaves at row 28, key 15 at row 35
    assert _segments(40, 40, 8, 16, 20, False) == [(9, 16, True), (16, 28, False), (28, 35, True)]
    # a decode row at key index 39 sees the block wholly; a window of 5 hides it
    assert _segments(1, 40, 8, 16, None, False) == [(0, 1, False)]
    assert _segments(1, 40, 8, 16, 5, False) == []


def test_a_long_row_underflows_to_exact_zeros_not_nans():
    # every beta near 1: the stick is spent on the nearest key, older weights underflow
    q = torch.full((1, 1, 300, 4), 20.0)
    k = torch.ones(1, 1, 300, 4)
    v = torch.randn(1, 1, 300, 4).requires_grad_()
    o, rest = stick_breaking_blocks(q, k, v, block=32)
    torch.testing.assert_close(o[0, 0, 1:], v[0, 0, :-1].detach(), rtol=1e-6, atol=1e-6)
    # z = 40: the rest after n keys is sigmoid(-40)^n, 0 in float32 from n = 3
    assert rest[0, 0, 0] == 1 and rest[0, 0, 1].item() == pytest.approx(torch.sigmoid(torch.tensor(-40.0)).item())
    assert not rest[0, 0, 3:].any()
    o.sum().backward()
    assert torch.isfinite(v.grad).all()


def test_float32_gradients_stay_at_float32_rounding_over_many_blocks():
    # the backward sums da from the oldest key (no long row total cancelled): over 20 blocks of 16
    # the float32 gradients sit within 1e-6 of the float64 truth, relative to their largest entry
    g = torch.Generator().manual_seed(3)
    q, k, v, go = (torch.randn(1, 2, 320, 32, generator=g) for _ in range(4))

    def grads(dtype):
        x = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        o, rest = stick_breaking_blocks(*x, block=16)
        return torch.autograd.grad((o * go.to(dtype)).sum() + rest.sum(), x)

    for got, truth in zip(grads(torch.float32), grads(torch.float64)):
        assert (got.double() - truth).abs().max() / truth.abs().max() < 1e-6

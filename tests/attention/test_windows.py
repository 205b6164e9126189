"""Sliding-window attention by query blocks (posbench/attention/windows.py) against the masked
reference (posbench.core.masked.causal_attention with a window), values and gradients."""

import pytest
import torch

from posbench.attention.windows import band_mask, by_blocks, window_attention
from posbench.core.masked import causal_attention
from tests.helpers.attention import qkv


def reference(q, k, v, window):
    """Plain float64 softmax over the window, an (L, L) mask: the definition."""
    tq, tk = q.shape[-2], k.shape[-2]
    i = torch.arange(tq)[:, None] + tk - tq
    j = torch.arange(tk)[None, :]
    scores = (q.double() @ k.double().transpose(-1, -2)) / q.shape[-1] ** 0.5
    scores = scores.masked_fill(~((j <= i) & (j > i - window)), float("-inf"))
    return scores.softmax(-1) @ v.double()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize(
    "tq,tk,window,rows,seed",
    [(67, 67, 9, 16, 0), (131, 131, 40, 32, 1), (45, 70, 7, 8, 2), (1, 53, 11, 8, 3), (33, 33, 50, 8, 4)],
)
def test_blocks_equal_the_masked_reference(tq, tk, window, rows, seed, dtype):
    # odd lengths; decode rows (Tq < Tk, one query); a window longer than the input; GQA-expanded
    # keys (heads 2k and 2k + 1 share a key head), forward and gradient
    q, k, v = qkv(tq, tk, seed=seed, dtype=dtype)
    k, v = k[:, ::2].repeat_interleave(2, 1), v[:, ::2].repeat_interleave(2, 1)
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    got = window_attention(*leaves, window, rows=rows)
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-6, rtol=2e-5)
    torch.testing.assert_close(got.double(), reference(q, k, v, window), **tol)
    torch.testing.assert_close(got, causal_attention(q, k, v, window=window), **tol)
    grad = torch.randn(got.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    (got * grad).sum().backward()
    ref_leaves = [t.detach().double().requires_grad_(True) for t in (q, k, v)]
    (reference(*ref_leaves, window) * grad.double()).sum().backward()
    for a, b in zip(leaves, ref_leaves):
        torch.testing.assert_close(a.grad.double(), b.grad, **tol)


def test_band_mask_and_when_blocks_are_used():
    assert band_mask(2, 2, 0, 4, 2, "cpu").tolist() == [[False, True, True, False], [False, False, True, True]]
    assert by_blocks(1024, 1024, 256) and not by_blocks(1024, 1024, None)
    assert not by_blocks(1, 1024, 16)  # a decode step: one masked call
    assert not by_blocks(300, 300, 200)  # the window spans nearly every key

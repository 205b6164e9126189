"""Causal attention (posbench/core/masked.py) against plain float64 computations: bottom-right
alignment, and explicit attention over causal row blocks with a bias (outputs and gradients,
float32 and bfloat16)."""

import math

import pytest
import torch

from posbench.core.masked import causal_attention, causal_explicit_attention, causal_mask, mask_bias
from tests.helpers.fast_paths import DTYPES, TOL, assert_same_gradients, fast_path_qkv, float64_attention


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "seed, tq, tk", [(0, 128, 128), (1, 131, 131), (2, 255, 255), (3, 197, 230), (4, 300, 300), (5, 1, 150), (6, 63, 63)]
)
def test_causal_explicit_attention_equals_reference(seed, tq, tk, dtype):
    q, k, v = fast_path_qkv(seed, 2, 3, tq, tk, 16, dtype)
    g = torch.Generator().manual_seed(seed + 50)
    bias = (torch.randn(3, tq, tk, generator=g) * 2).to(dtype).requires_grad_()
    out = causal_explicit_attention(q, k, v, mask_bias(bias))
    assert out.dtype == dtype and out.shape == q.shape
    ref = float64_attention(q, k, v, bias)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    assert_same_gradients(out, ref, (q, k, v, bias), seed, dtype)


@pytest.mark.parametrize("tq, tk", [(5, 5), (1, 7), (3, 8)])
def test_causal_attention_bottom_right_alignment(tq, tk):
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 3, tq, 8), torch.randn(2, 3, tk, 8), torch.randn(2, 3, tk, 8)
    out = causal_attention(q, k, v)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-5)
    zero = torch.zeros(3, tq, tk)
    torch.testing.assert_close(causal_attention(q, k, v, zero), out, rtol=1e-5, atol=1e-5)

"""ALiBi's slopes and bias (posbench/core/alibi_math.py) against the paper's construction, and the
alibi method built on them (methods/alibi.py; its tests live here because tests/hf/test_alibi.py
holds that file name) against its closed form in float64, with its bias kept float32."""

import math

import pytest
import torch

from posbench.core.alibi_math import alibi_bias, alibi_slopes
from tests.helpers.methods import model_method


def test_alibi_slopes_8_heads_are_powers_of_one_half():
    assert alibi_slopes(8) == pytest.approx([2.0**-i for i in range(1, 9)], rel=1e-12)


def test_alibi_slopes_16_heads_interleave_half_powers():
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-0.5 * i) for i in range(1, 17)], rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 4, 32, 64])
def test_alibi_slopes_power_of_two_geometric(n):
    start = 2.0 ** (-8.0 / n)
    assert alibi_slopes(n) == pytest.approx([start ** (i + 1) for i in range(n)], rel=1e-12)


def test_alibi_slopes_non_power_of_two_follow_paper_construction():
    # 6 heads: the 4-head slopes, then every other slope of the 8-head sequence (2 of them).
    assert alibi_slopes(6) == pytest.approx([2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3])
    # 12 heads: 8-head slopes + odd powers of 2^-0.5 from the 16-head sequence.
    assert alibi_slopes(12) == pytest.approx([2.0**-i for i in range(1, 9)] + [2**-0.5, 2**-1.5, 2**-2.5, 2**-3.5])
    # 3 heads: 2-head slopes (1/16, 1/256) then the first slope of the 4-head sequence (1/4).
    assert alibi_slopes(3) == pytest.approx([2**-4, 2**-8, 2**-2])
    for n in range(1, 40):
        s = alibi_slopes(n)
        assert len(s) == n and len(set(s)) == n and all(0 < x < 1 for x in s)


@pytest.mark.parametrize("bad", [0, -2, 2.5])
def test_alibi_slopes_reject_bad_head_count(bad):
    with pytest.raises(ValueError, match="positive integer"):
        alibi_slopes(bad)


def test_alibi_scores_equal_closed_form():
    """softmax(q k^T / sqrt(d) - m (i - j)) v, computed by hand in float64."""
    torch.manual_seed(0)
    m = model_method("alibi")
    b, h, t, d = 2, 4, 9, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    pos = torch.arange(t)
    out = m.attend(q, k, v, pos, pos, 0)
    slopes = torch.tensor(alibi_slopes(h), dtype=torch.float64)
    i, j = torch.arange(t)[:, None], torch.arange(t)[None, :]
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d) - slopes[:, None, None] * (i - j)
    scores = scores.masked_fill(j > i, float("-inf"))
    expected = torch.softmax(scores, -1) @ v.double()
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)
    bias = alibi_bias(slopes.float(), pos, pos)
    assert bias[2, 5, 1].item() == pytest.approx(-slopes[2].item() * 4)


def test_alibi_bias_is_float32_and_cached_per_positions():
    m = model_method("alibi")
    pos = torch.arange(12)
    assert m.bias(pos, pos, torch.bfloat16).dtype == torch.float32
    # prepare (BiasMethod's) caches alibi's bias, a function of the positions alone
    a = m.prepare(pos, pos, torch.bfloat16)
    assert a.dtype == torch.float32
    assert m.prepare(pos, pos, torch.bfloat16) is a  # same positions tensor: cached, not rebuilt
    assert m.prepare(torch.arange(12), torch.arange(12), torch.bfloat16) is not a


def test_alibi_bias_dtype_compute_casts_and_bad_value_is_one_line():
    m = model_method("alibi", method_options={"bias_dtype": "compute"})
    pos = torch.arange(8)
    assert m.bias(pos, pos, torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="bias_dtype must be one of float32, compute"):
        model_method("alibi", method_options={"bias_dtype": "fp8"})


def test_float32_bias_with_bfloat16_compute_keeps_distances_distinct():
    """The bias reaches the softmax in float32: distinct far distances stay distinct."""
    m = model_method("alibi", n_heads=1, d_model=16)
    t = 600
    pos = torch.arange(t)
    bias = m.bias(pos[-1:], pos, torch.bfloat16)
    assert len(torch.unique(bias)) == t
    assert len(torch.unique(bias.to(torch.bfloat16))) < 0.75 * t  # bfloat16 merges many distances
    # and attend on bfloat16 inputs equals the float32 computation rounded once at the end
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 1, t, 16) for _ in range(3))
    out = m.attend(q.bfloat16(), k.bfloat16(), v.bfloat16(), pos, pos, 0)
    ref = m.attend(q.bfloat16().float(), k.bfloat16().float(), v.bfloat16().float(), pos, pos, 0)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)

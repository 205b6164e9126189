"""Reference values from the papers, and the closed forms each method must follow."""

import importlib
import math

import pytest
import torch

from posbench.core import registry
from posbench.core.alibi_math import alibi_bias, alibi_slopes
from posbench.core.method import ModelConfig, causal_attention, causal_mask
from posbench.core.model import build_model, model_config


def method(name, **cfg):
    return registry.build(ModelConfig(method=name, **{"d_model": 64, "n_heads": 4, **cfg}))


# --- ALiBi -------------------------------------------------------------------------------------


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
    m = method("alibi")
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
    m = method("alibi")
    pos = torch.arange(12)
    assert m.bias(pos, pos, torch.bfloat16).dtype == torch.float32
    # prepare (BiasMethod's) caches alibi's bias, a function of the positions alone
    a = m.prepare(pos, pos, torch.bfloat16)
    assert a.dtype == torch.float32
    assert m.prepare(pos, pos, torch.bfloat16) is a  # same positions tensor: cached, not rebuilt
    assert m.prepare(torch.arange(12), torch.arange(12), torch.bfloat16) is not a


def test_alibi_bias_dtype_compute_casts_and_bad_value_is_one_line():
    m = method("alibi", method_options={"bias_dtype": "compute"})
    pos = torch.arange(8)
    assert m.bias(pos, pos, torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="bias_dtype must be one of float32, compute"):
        method("alibi", method_options={"bias_dtype": "fp8"})


def test_float32_bias_with_bfloat16_compute_keeps_distances_distinct():
    """The bias reaches the softmax in float32: distinct far distances stay distinct."""
    m = method("alibi", n_heads=1, d_model=16)
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


# --- T5 bias -----------------------------------------------------------------------------------


def test_t5_buckets_match_published_function():
    t5 = importlib.import_module(registry.get("t5_bias").__module__)
    d = torch.tensor([0, 1, 5, 15, 16, 17, 20, 31, 32, 45, 63, 64, 90, 127, 128, 500, 10_000])
    # Values of T5's _relative_position_bucket(-d, bidirectional=False, 32, 128), worked by hand:
    # d < 16 -> d; else 16 + floor(log(d / 16) / log(8) * 16), capped at 31.
    expected = [0, 1, 5, 15, 16, 16, 17, 21, 21, 23, 26, 26, 29, 31, 31, 31, 31]
    assert t5.relative_position_bucket(d).tolist() == expected
    for n in d.tolist():
        want = n if n < 16 else min(31, 16 + int(math.log(n / 16) / math.log(8) * 16))
        assert t5.relative_position_bucket(torch.tensor([n])).item() == want
    assert t5.relative_position_bucket(torch.tensor([-3])).item() == 0  # future keys
    assert t5.relative_position_bucket(torch.tensor([20.7])).item() == 17  # floats are floored


def test_t5_bias_table_shared_by_layers_and_unscaled():
    torch.manual_seed(0)
    m = method("t5_bias")
    assert m.table.weight.shape == (32, 4)
    with torch.no_grad():
        m.table.weight.normal_()
    b, h, t, d = 1, 4, 6, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    pos = torch.arange(t)
    out0, out5 = m.attend(q, k, v, pos, pos, 0), m.attend(q, k, v, pos, pos, 5)
    torch.testing.assert_close(out0, out5)  # one table for every layer
    bias = m.table.weight[(pos[:, None] - pos[None, :]).clamp(min=0)].permute(2, 0, 1).double()
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d) + bias
    scores = scores.masked_fill(~causal_mask(t, t, "cpu"), float("-inf"))
    torch.testing.assert_close(out0.double(), torch.softmax(scores, -1) @ v.double(), rtol=1e-5, atol=1e-5)


# --- rotary ------------------------------------------------------------------------------------


def test_rotary_scores_depend_only_on_relative_position():
    rot = method("rotary")
    torch.manual_seed(1)
    q = torch.randn(1, 1, 1, 16).double()
    k = torch.randn(1, 1, 1, 16).double()
    rot = rot.double()

    def score(m, n):
        cq, sq = rot._cos_sin(torch.tensor([m]), torch.float64)
        ck, sk = rot._cos_sin(torch.tensor([n]), torch.float64)
        return (rot.rotate(q, cq, sq) * rot.rotate(k, ck, sk)).sum().item()

    for m, n in [(5, 2), (105, 102), (3005, 3002), (2.5, -0.5)]:
        assert score(m, n) == pytest.approx(score(3, 0), rel=1e-9, abs=1e-9)
    assert score(7, 0) != pytest.approx(score(3, 0))
    # Rotation preserves the norm, and position 0 is the identity.
    c0, s0 = rot._cos_sin(torch.tensor([0]), torch.float64)
    torch.testing.assert_close(rot.rotate(q, c0, s0), q)


def test_rotary_angles_are_the_float32_products_at_any_position():
    # Computed for the rows asked (a decode step asks for one), equal bit for bit to what a table
    # of arange * inv_freq would hold, without reading pos.max() to size a table.
    rot = method("rotary")
    pos = torch.tensor([0, 1, 9, 5000, 5001, 70000])
    table = torch.arange(70001, dtype=torch.float32)[:, None] * rot.inv_freq[None]
    assert torch.equal(rot._angles(pos), table[pos])


# --- sinusoidal --------------------------------------------------------------------------------


def test_sinusoidal_matches_vaswani_formula():
    s = method("sinusoidal", d_model=8, n_heads=2)
    pos = torch.tensor([0, 1, 7, 1000])
    pe = s.table(pos).double()
    for r, p in enumerate(pos.tolist()):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert pe[r, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[r, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)


# --- shared attention helper -------------------------------------------------------------------


@pytest.mark.parametrize("tq, tk", [(5, 5), (1, 7), (3, 8)])
def test_causal_attention_bottom_right_alignment(tq, tk):
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 3, tq, 8), torch.randn(2, 3, tk, 8), torch.randn(2, 3, tk, 8)
    out = causal_attention(q, k, v)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8)).masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v, rtol=1e-5, atol=1e-5)
    zero = torch.zeros(3, tq, tk)
    torch.testing.assert_close(causal_attention(q, k, v, zero), out, rtol=1e-5, atol=1e-5)


# --- model -------------------------------------------------------------------------------------


def test_presets_have_the_papers_shapes():
    wt = model_config("wt103", "alibi")
    assert (wt.n_layers, wt.d_model, wt.n_heads, wt.d_ff) == (16, 1024, 8, 4096)
    cc = model_config("cc100-1.3b", "alibi")
    assert (cc.n_layers, cc.d_model, cc.n_heads, cc.d_ff) == (25, 2048, 16, 8192)
    tiny = build_model(model_config("tiny", "sinusoidal"))
    assert 0.5e6 < tiny.num_parameters() < 1.5e6
    assert tiny.tok.weight is not None and tiny.tok.weight.data_ptr() == tiny.tok.weight.data_ptr()


def test_model_ties_embeddings_and_rejects_bad_config():
    model = build_model(model_config("tiny", "nope", n_layers=1))
    idx = torch.randint(0, 256, (1, 4))
    logits = model(idx)
    x = model.ln_f(model.blocks[0](model.tok(idx) * 128**0.5, model.method, torch.arange(4), torch.arange(4), None, None))
    torch.testing.assert_close(logits, x @ model.tok.weight.T)
    with pytest.raises(ValueError, match="unknown model preset 'huge'; allowed: tiny, small"):
        model_config("huge")
    with pytest.raises(ValueError, match="unknown model option"):
        model_config("tiny", layers=3)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        model_config("tiny", n_heads=3)
    with pytest.raises(ValueError, match="pos must have shape"):
        model(idx, pos=torch.arange(5))


def test_methods_work_under_inference_mode():
    """Evaluation runs under torch.inference_mode, whose tensors keep no version counter."""
    for name in ("alibi", "rotary", "t5_bias"):
        model = build_model(model_config("tiny", name, n_layers=1))
        idx = torch.randint(0, 256, (1, 12))
        with torch.no_grad():
            expected = model(idx)
        with torch.inference_mode():
            torch.testing.assert_close(model(idx), expected)
            torch.testing.assert_close(model(idx, pos=torch.arange(12)), expected)

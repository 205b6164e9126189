"""The methods of issue 16 against plain references of their papers' formulas.

The conformance kit (tests/test_conformance.py) already runs every check on each of them; these
tests pin the mathematics: each method's output equals a direct float64 computation of the
formula in its docstring.
"""
import math

import pytest
import torch

from posbench import registry
from posbench.method import ModelConfig
from posbench.model import TransformerLM

NEW = ["learned", "kerple_log", "xpos", "p_rope", "rope_nope_hybrid", "fire", "randomized"]


def method(name, **options):
    cfg = ModelConfig(d_model=64, n_heads=4, n_layers=4, method=name, method_options=options)
    return registry.build(cfg)


def reference_attention(q, k, v, bias=None):
    """softmax(q k^T / sqrt(d) + bias) v in float64, causal (bottom-right aligned)."""
    q, k, v = q.double(), k.double(), v.double()
    tq, tk = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    i = torch.arange(tq)[:, None] + (tk - tq)
    j = torch.arange(tk)[None, :]
    scores = scores.masked_fill(j > i, float("-inf"))
    return torch.softmax(scores, -1) @ v


def qkv(tq, tk, h=4, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, tq, d, generator=g).to(dtype)
    k = torch.randn(2, h, tk, d, generator=g).to(dtype)
    v = torch.randn(2, h, tk, d, generator=g).to(dtype)
    return q, k, v


def rotate_reference(x, pos, inv_freq):
    """Rotary on channel pairs (i, i + d/2) by angle pos * inv_freq_i, float64."""
    ang = pos.double()[:, None] * inv_freq.double()[None, :]
    c, s = ang.cos(), ang.sin()
    x1, x2 = x.double().chunk(2, -1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def test_every_new_method_is_registered():
    assert set(NEW) <= set(registry.names())


# --- learned -----------------------------------------------------------------------------------


def test_learned_adds_table_rows_and_interpolates_float_positions():
    m = method("learned", max_positions=32)
    x = torch.randn(2, 5, 64)
    pos = torch.arange(3, 8)
    torch.testing.assert_close(m.embed(x, pos), x + m.weight[3:8][None])
    half = torch.tensor([0.0, 2.5, 7.25])
    expected = torch.stack([m.weight[0], 0.5 * (m.weight[2] + m.weight[3]), 0.75 * m.weight[7] + 0.25 * m.weight[8]])
    torch.testing.assert_close(m.table(half), expected)


def test_learned_clamps_beyond_the_table_by_default():
    m = method("learned", max_positions=8)
    out = m.table(torch.tensor([6, 7, 8, 100]))
    for row in out[1:]:
        torch.testing.assert_close(row, m.weight[7])
    torch.testing.assert_close(m.table(torch.tensor([9.5])), m.weight[7][None])


def test_learned_error_beyond_the_table_is_one_line():
    m = method("learned", max_positions=8, beyond="error")
    m.table(torch.arange(8))  # inside: fine
    with pytest.raises(ValueError, match=r"^learned: position 8 is beyond the table of 8 positions; allowed"):
        m.table(torch.arange(9))
    with pytest.raises(ValueError, match="beyond must be one of clamp, error"):
        method("learned", beyond="wrap")
    with pytest.raises(ValueError, match="max_positions must be a positive integer"):
        method("learned", max_positions=0)


def test_learned_table_starts_at_fairseq_scale():
    m = method("learned")
    assert m.weight.shape == (1024, 64)
    assert m.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    model = TransformerLM(ModelConfig(d_model=64, n_heads=4, method="learned"))
    assert model.method.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)  # not re-initialised

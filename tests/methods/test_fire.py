"""FIRE (methods/fire.py) against its paper's formula computed element by element in float64."""

import math

import pytest
import torch

from tests.helpers.attention import method, qkv, reference_attention


def fire_reference_bias(m, q_pos, k_pos):
    """The paper's formula, element by element in float64 (a loop: a reference, not a fast path)."""
    c = abs(m.c.item())
    L = abs(m.L_multiplier.item() * m.init_L)
    w1, b1, w2, b2 = (p.detach().double() for p in (m.w1, m.b1, m.w2, m.b2))
    out = torch.zeros(w2.shape[0], len(q_pos), len(k_pos), dtype=torch.float64)
    for a, i in enumerate(q_pos.tolist()):
        for b, j in enumerate(k_pos.tolist()):
            x = math.log(c * max(i - j, 0) + 1) / (math.log(c * max(L, i) + 1) + m.eps)
            out[:, a, b] = w2 @ torch.relu(w1 * x + b1) + b2
    return out


@pytest.mark.parametrize("tq, tk, start, init_L", [(9, 9, 0, 512.0), (3, 11, 40, 8.0), (1, 7, 700, 512.0)])
def test_fire_equals_formula(tq, tk, start, init_L):
    torch.manual_seed(tk)
    m = method("fire", init_L=init_L)
    q, k, v = qkv(tq, tk, seed=tk)
    pos = torch.arange(start, start + tk)
    bias = fire_reference_bias(m, pos[-tq:], pos)
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, bias), rtol=1e-4, atol=1e-4)


def test_fire_progressive_interpolation_keeps_inputs_in_unit_range():
    m = method("fire", init_L=16.0)
    pos = torch.arange(4096)
    x = m.normalized_distance(pos[-1:], pos)
    assert x.max().item() == pytest.approx(1.0, abs=1e-5) and x.min().item() == 0.0
    inside = m.normalized_distance(torch.tensor([8]), torch.arange(9))
    # query 8 < L = 16: divided by psi(16), so its longest distance maps below 1
    assert inside[0, 0].item() == pytest.approx(math.log(0.1 * 8 + 1) / math.log(0.1 * 16 + 1), rel=1e-5)
    with pytest.raises(ValueError, match="fire: init_L must be a positive number"):
        method("fire", init_L=0)

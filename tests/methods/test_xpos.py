"""xPos (methods/xpos.py) against a float64 computation of its formula."""

import pytest
import torch

from tests.helpers.attention import method, qkv, reference_attention, rotate_reference


def xpos_reference(q, k, q_pos, k_pos, base=10000.0, scale_base=512.0, gamma=0.4):
    """xPos q and k in float64, exponents not centred: q zeta^(n/gamma), k zeta^(-m/gamma)."""
    d = q.shape[-1]
    i2 = torch.arange(0, d, 2, dtype=torch.float64)
    inv_freq = base ** (-i2 / d)
    zeta = (i2 / d + gamma) / (1 + gamma)
    up = lambda p, sign: (zeta[None, :] ** (sign * p.double()[:, None] / scale_base)).repeat(1, 2)
    return rotate_reference(q, q_pos, inv_freq) * up(q_pos, 1), rotate_reference(k, k_pos, inv_freq) * up(k_pos, -1)


@pytest.mark.parametrize("tq, tk, start", [(9, 9, 0), (3, 11, 100), (1, 7, 2000)])
def test_xpos_equals_formula(tq, tk, start):
    m = method("xpos")
    q, k, v = qkv(tq, tk, seed=tk)
    pos = torch.arange(start, start + tk)
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    rq, rk = xpos_reference(q, k, pos[-tq:], pos)
    torch.testing.assert_close(out.double(), reference_attention(rq, rk, v), rtol=1e-4, atol=1e-4)


def test_xpos_zeta_values_and_decay():
    m = method("xpos")  # head_dim 16
    zeta = m.log_zeta.exp()
    assert zeta[0].item() == pytest.approx(0.4 / 1.4) and zeta[-1].item() == pytest.approx((14 / 16 + 0.4) / 1.4)
    # Same q and k at every position: the score decays with distance (zeta < 1).
    x = torch.ones(1, 1, 2000, 16)
    pos = torch.arange(2000)
    cos_q, sin_q, cos_k, sin_k = m.tables(pos, torch.float32)
    qq, kk = m._rotate(x, cos_q, sin_q), m._rotate(x, cos_k, sin_k)
    # a zero angle (cos 1, sin 0) isolates the decay: compare |scales| products
    scale = (cos_q**2 + sin_q**2).sqrt()[-1] * (cos_k**2 + sin_k**2).sqrt()  # (T, hd/2), query at 1999
    expected = zeta[None, :].double() ** ((1999 - pos.double())[:, None] / 512)
    torch.testing.assert_close(scale.double(), expected, rtol=1e-4, atol=1e-7)
    assert torch.isfinite(qq).all() and torch.isfinite(kk).all()

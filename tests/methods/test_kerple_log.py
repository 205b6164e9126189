"""KERPLE's logarithmic bias (methods/kerple_log.py) against a float64 computation of its formula."""

import math

import pytest
import torch

from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from tests.helpers.attention import method, qkv, reference_attention


@pytest.mark.parametrize("tq, tk", [(9, 9), (3, 11), (1, 7)])
@pytest.mark.parametrize("seed", [0, 1])
def test_kerple_log_equals_formula(tq, tk, seed):
    torch.manual_seed(seed)
    m = method("kerple_log")
    q, k, v = qkv(tq, tk, seed=seed)
    pos = torch.arange(tk)
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    r1, r2 = m.r1.detach().double(), m.r2.detach().double()
    assert (r1 > 0).all() and (r1 < 2).all() and (r2 > 0).all() and (r2 < 1).all()  # paper's init
    dist = (pos[-tq:, None] - pos[None, :]).abs().double()
    bias = -r1[:, None, None] * torch.log1p(r2[:, None, None] * dist)
    torch.testing.assert_close(out.double(), reference_attention(q, k, v, bias), rtol=1e-5, atol=1e-5)


def test_kerple_log_keeps_r_positive_with_gradient():
    m = method("kerple_log")
    with torch.no_grad():
        m.r1.fill_(-1.0)
        m.r2.fill_(-3.0)
    pos = torch.arange(5)
    bias = m.bias(pos, pos)
    # r clamped to eps = 0.01: -0.01 * log(1 + 0.01 * 4) at distance 4
    assert bias[0, 4, 0].item() == pytest.approx(-0.01 * math.log(1.04), rel=1e-5)
    bias[:, 4, 0].sum().backward()
    assert (m.r1.grad != 0).all() and (m.r2.grad != 0).all()


def test_kerple_log_bias_is_shared_by_layers_in_one_forward():
    model = build_model(ModelConfig(d_model=64, n_heads=4, n_layers=3, method="kerple_log"))
    built = []
    original = model.method.bias
    model.method.bias = lambda *a, **kw: built.append(1) or original(*a, **kw)
    model(torch.randint(0, 256, (2, 10)))
    assert len(built) == 1
    model(torch.randint(0, 256, (2, 10)))
    assert len(built) == 2  # a new forward builds again (the parameters may have changed)

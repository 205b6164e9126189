"""The methods of issue 16 against plain references of their papers' formulas.

The conformance kit (tests/core/test_conformance.py) already runs every check on each of them; these
tests pin the mathematics: each method's output equals a direct float64 computation of the
formula in its docstring.
"""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from tests.helpers.attention import method, qkv, reference_attention, rotate_reference
from tests.helpers.methods import NEW


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
    model = build_model(ModelConfig(d_model=64, n_heads=4, method="learned"))
    assert model.method.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)  # not re-initialised


# --- kerple_log --------------------------------------------------------------------------------


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


# --- xpos --------------------------------------------------------------------------------------


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


# --- p_rope ------------------------------------------------------------------------------------


@pytest.mark.parametrize("fraction, rotated", [(0.75, 6), (0.25, 2), (1.0, 8), (0.0, 0)])
def test_p_rope_rotates_the_highest_fraction_of_frequencies(fraction, rotated):
    m = method("p_rope", fraction=fraction)  # head_dim 16: 8 pairs
    assert m.rotated == rotated
    q, k, v = qkv(6, 10, d=16, seed=rotated)
    pos = torch.arange(10) + 37
    inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    inv_freq[rotated:] = 0.0
    rq, rk = rotate_reference(q, pos[-6:], inv_freq), rotate_reference(k, pos, inv_freq)
    out = m.attend(q, k, v, pos[-6:], pos, 0)
    torch.testing.assert_close(out.double(), reference_attention(rq, rk, v), rtol=1e-5, atol=1e-5)


def test_p_rope_zero_is_nope_and_bad_fraction_is_one_line():
    m = method("p_rope", fraction=0.0)
    q, k, v = qkv(5, 5)
    pos = torch.arange(5) + 3
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0).double(), reference_attention(q, k, v), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"p_rope: fraction must be a number in \[0, 1\]"):
        method("p_rope", fraction=1.5)


# --- rope_nope_hybrid --------------------------------------------------------------------------


@pytest.mark.parametrize("every, nope_layers", [(4, {3}), (2, {1, 3}), (1, {0, 1, 2, 3})])
def test_rope_nope_hybrid_layers(every, nope_layers):
    m = method("rope_nope_hybrid", every=every)  # 4 layers
    q, k, v = qkv(7, 7, d=16)
    pos = torch.arange(7) + 5
    inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    rope = reference_attention(rotate_reference(q, pos, inv_freq), rotate_reference(k, pos, inv_freq), v)
    nope = reference_attention(q, k, v)
    for layer in range(4):
        out = m.attend(q, k, v, pos, pos, layer).double()
        torch.testing.assert_close(out, nope if layer in nope_layers else rope, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="rope_nope_hybrid: every must be a positive integer"):
        method("rope_nope_hybrid", every=0)


# --- fire --------------------------------------------------------------------------------------


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


# --- randomized --------------------------------------------------------------------------------


def test_randomized_samples_an_ordered_subset_in_training_only():
    m = method("randomized", max_len=100)
    torch.manual_seed(0)
    draws = [m.sample(20, "cpu") for _ in range(50)]
    for d in draws:
        assert d.shape == (20,) and (d[1:] > d[:-1]).all() and d.min() >= 0 and d.max() < 100
    assert len({tuple(d.tolist()) for d in draws}) == 50  # random
    counts = torch.bincount(torch.cat(draws), minlength=100).double()
    assert counts.min() > 0 and counts.std() / counts.mean() < 0.5  # uniform over the range, not a prefix
    with pytest.raises(ValueError, match="randomized: a training sequence of 101 tokens is longer than max_len 100"):
        m.sample(101, "cpu")
    with pytest.raises(ValueError, match="randomized: base must be one of rotary, sinusoidal"):
        method("randomized", base="alibi")


@pytest.mark.parametrize("base", ["rotary", "sinusoidal"])
def test_randomized_uses_the_draw_in_every_layer_while_training(base):
    model = build_model(
        ModelConfig(d_model=64, n_heads=4, n_layers=3, method="randomized", method_options={"base": base, "max_len": 64})
    )
    m = model.method
    idx = torch.randint(0, 256, (2, 12))
    seen = []
    inner_embed, inner_attend = m.inner.embed, m.inner.attend
    m.inner.embed = lambda x, pos, state=None: seen.append(("embed", pos)) or inner_embed(x, pos, state)
    m.inner.attend = lambda q, k, v, qp, kp, layer, state=None: (
        seen.append((layer, qp, kp)) or inner_attend(q, k, v, qp, kp, layer, state)
    )
    torch.manual_seed(3)
    model.train()(idx)
    torch.manual_seed(3)
    expected = m.sample(12, "cpu")
    assert torch.equal(seen[0][1], expected) and not torch.equal(expected, torch.arange(12))
    for _, qp, kp in seen[1:]:
        assert torch.equal(qp, expected) and torch.equal(kp, expected)
    seen.clear()
    model.eval()(idx)
    assert torch.equal(seen[0][1], torch.arange(12))
    assert all(torch.equal(kp, torch.arange(12)) for _, _, kp in seen[1:])
    # The training forward equals the base method's at the drawn positions.
    plain = build_model(ModelConfig(d_model=64, n_heads=4, n_layers=3, method=base))
    plain.load_state_dict(model.state_dict(), strict=False)
    torch.manual_seed(3)
    model.train()
    out = model(idx)
    torch.testing.assert_close(out, plain.train()(idx, pos=expected))


def test_randomized_eval_positions_sampled_draws_in_evaluation_too():
    # The paper's protocol: evaluation draws positions as training does (one draw per forward);
    # a KV-cache decoding step would read another draw, so it is refused with one line.
    model = build_model(
        ModelConfig(
            d_model=32, n_heads=2, n_layers=2, method="randomized", method_options={"max_len": 64, "eval_positions": "sampled"}
        )
    ).eval()
    plain = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2, method="rotary"))
    plain.load_state_dict(model.state_dict(), strict=False)
    idx = torch.randint(0, 256, (2, 12))
    torch.manual_seed(5)
    out = model(idx)
    torch.manual_seed(5)
    drawn = model.method.sample(12, "cpu")
    assert not torch.equal(drawn, torch.arange(12))
    torch.testing.assert_close(out, plain.eval()(idx, pos=drawn))
    cache = model.new_cache()
    model(idx[:, :5], cache=cache)
    with pytest.raises(ValueError, match="randomized: eval_positions 'sampled' draws the positions of each full"):
        model(idx[:, 5:6], cache=cache)
    with pytest.raises(ValueError, match="randomized: eval_positions must be one of given, sampled, got 'random'"):
        method("randomized", eval_positions="random")
    with pytest.raises(ValueError, match="randomized: an evaluated sequence of 65 tokens is longer than max_len 64"):
        model(torch.randint(0, 256, (1, 65)))

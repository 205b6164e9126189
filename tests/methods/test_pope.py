"""PoPE against values computed by hand from its paper's equations (methods/pope.py)."""

import math
import sys

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from tests.helpers.attention import method
from tests.helpers.methods import encode, one_head


def test_pope_score_is_softplus_magnitudes_times_the_cosine_of_the_phase_difference():
    # hd 2, base 4: theta = [1, 1/2]; delta = [0, -pi/2]. q = [0, 1] at m = 3, k = [-1, 0] at n = 1:
    # score = sum_c sp(q_c) sp(k_c) cos(2 theta_c - delta_c) / sqrt 2, sp = softplus.
    m = one_head("pope", 2, base=4.0)
    with torch.no_grad():
        m.phase_bias.copy_(torch.tensor([[[0.0, -math.pi / 2]]]))
    pos = torch.tensor([1, 3])
    x = torch.tensor([[-1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)  # row 0: the key at 1, row 1: the query at 3
    q, k = encode(m, x, pos)
    got = (q[0, 0, 1] @ k[0, 0, 0]) / math.sqrt(4)  # SDPA's scale for 2 hd channels

    def sp(z):
        return math.log1p(math.exp(z))

    want = (sp(0.0) * sp(-1.0) * math.cos(2.0) + sp(1.0) * sp(0.0) * math.cos(1.0 + math.pi / 2)) / math.sqrt(2)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_pope_phase_bias_is_clamped_to_minus_two_pi_to_zero():
    m = one_head("pope", 2, base=4.0)
    with torch.no_grad():
        m.phase_bias.copy_(torch.tensor([[[1.0, -7.0]]]))
    angle = m.key_angle(torch.zeros(1, 2, dtype=torch.float64), 1, 0)
    torch.testing.assert_close(angle[0, 0], torch.tensor([0.0, -2 * math.pi], dtype=torch.float64))


@pytest.mark.parametrize("name", ["pope"])
def test_bad_options_are_one_line(name):
    with pytest.raises(ValueError, match=f"{name}: base must be a number > 1"):
        method(name, base=1)


def test_scale_doubled_is_lucidrains_one_over_sqrt_two_hd():
    # the same encoded pair as above: "doubled" leaves the query unscaled, its logit 1/sqrt 2 of the default's
    pos = torch.tensor([1, 3])
    x = torch.tensor([[-1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)
    logits = []
    for scale in ("head_dim", "doubled"):
        m = one_head("pope", 2, base=4.0, scale=scale)
        q, k = encode(m, x, pos)
        logits.append((q[0, 0, 1] @ k[0, 0, 0]).item())
    assert m.scale == "doubled" and logits[1] == pytest.approx(logits[0] / math.sqrt(2), rel=1e-6)


def polar_reference(m, q, k, v, layer):
    """softmax over PoPE's scores, written out from the equation (float64, causal bottom-right):
    sum_c sp(q_c) sp(k_c) cos((m - n) theta_c - delta_c) / sqrt(hd) (times 1/sqrt 2 for "doubled")."""
    tq, tk, hd = q.shape[-2], k.shape[-2], q.shape[-1]
    sp_q, sp_k = torch.nn.functional.softplus(q.double()), torch.nn.functional.softplus(k.double())
    theta = m.inv_freq.double()  # (hd,)
    delta = m.phase_bias[layer].clamp(-2 * math.pi, 0).double()  # (Hkv, hd)
    delta = delta.repeat_interleave(q.shape[1] // delta.shape[0], 0)[None, :, None, None, :]
    dist = (torch.arange(tq)[:, None] + tk - tq - torch.arange(tk)[None, :]).double()  # (Tq, Tk): m - n
    cos = torch.cos(dist[..., None] * theta - delta)  # (1, H, Tq, Tk, hd)
    scores = (sp_q[..., :, None, :] * sp_k[..., None, :, :] * cos).sum(-1) / math.sqrt(hd)
    scores = scores / (1.0 if m.scale == "head_dim" else math.sqrt(2))
    scores = scores.masked_fill(dist < 0, float("-inf"))
    return scores.softmax(-1) @ v.double()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tq,tk,scale", [(37, 37, "head_dim"), (1, 41, "head_dim"), (5, 29, "doubled"), (64, 64, "doubled")])
def test_padded_values_keep_sdpa_on_one_width_and_equal_the_equation(dtype, tq, tk, scale):
    from torch.overrides import TorchFunctionMode

    class Widths(TorchFunctionMode):  # the head widths each SDPA call is handed
        seen = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.nn.functional.scaled_dot_product_attention:
                self.seen.append(tuple(x.shape[-1] for x in args[:3]))
            return func(*args, **(kwargs or {}))

    # 4 query heads of 16 sharing 2 key heads (the model hands attend k and v expanded to 4)
    m = registry.build(
        ModelConfig(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, method="pope", method_options={"scale": scale})
    )
    m = m.to(dtype)
    with torch.no_grad():
        m.phase_bias.uniform_(-1.0, 0.0)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(2, 4, tq, 16, generator=g, dtype=dtype).requires_grad_()
        k = torch.randn(2, 4, tk, 16, generator=g, dtype=dtype).requires_grad_()
        v = torch.randn(2, 4, tk, 16, generator=g, dtype=dtype).requires_grad_()
        pos = torch.arange(tk)
        with Widths() as widths:
            got = m.attend(q, k, v, pos[tk - tq :], pos, 1)
        assert widths.seen[-1] == (32, 32, 32) and got.shape == v[..., tk - tq :, :].shape
        want = polar_reference(m, q, k, v, 1)
        tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(got.double(), want, **tol)
        grad = torch.randn(want.shape, generator=g, dtype=torch.float64)
        got_grads = torch.autograd.grad((got.double() * grad).sum(), (q, k, v))
        want_grads = torch.autograd.grad((want * grad).sum(), (q, k, v))
        for a, b in zip(got_grads, want_grads):
            torch.testing.assert_close(a.double(), b.double(), **tol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("t, scale", [(37, "head_dim"), (65, "doubled"), (1, "head_dim")])
def test_pope_training_takes_the_blocked_backward_and_equals_the_equation(monkeypatch, dtype, t, scale):
    """A CPU training forward (Tq == Tk, autograd on): the flash forward with padded values and the
    blocked backward at the values' width; values and every gradient as the equation's, under GQA."""
    pope = sys.modules[type(method("pope")).__module__]
    if not pope.flash_here("cpu"):
        pytest.skip("torch's CPU flash op takes no attn_mask")
    taken = []
    real = pope.causal_flash_attention
    monkeypatch.setattr(pope, "causal_flash_attention", lambda *a: taken.append(a[2].shape[-1]) or real(*a))
    m = registry.build(
        ModelConfig(d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, method="pope", method_options={"scale": scale})
    ).to(dtype)
    with torch.no_grad():
        m.phase_bias.uniform_(-1.0, 0.0)
    g = torch.Generator().manual_seed(t)
    q, k, v = (torch.randn(2, 4, t, 16, generator=g, dtype=dtype).requires_grad_() for _ in range(3))
    pos = torch.arange(t)
    got = m.attend(q, k, v, pos, pos, 1)
    assert taken == [16]  # the values reach the blocked path at their own width
    want = polar_reference(m, q, k, v, 1)
    tol = dict(rtol=1e-10, atol=1e-10) if dtype == torch.float64 else dict(rtol=2e-5, atol=2e-5)
    torch.testing.assert_close(got.double(), want, **tol)
    grad = torch.randn(want.shape, generator=g, dtype=torch.float64)
    params = (q, k, v, m.phase_bias)
    got_grads = torch.autograd.grad((got.double() * grad).sum(), params)
    want_grads = torch.autograd.grad((want * grad).sum(), params)
    for a, b in zip(got_grads, want_grads):
        torch.testing.assert_close(a.double(), b.double(), **tol)
    assert "blocked backward" in m.attn_backend("cpu", torch.float32)

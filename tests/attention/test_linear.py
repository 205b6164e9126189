"""ALiBi's linear plan on a CPU takes plain causal attention's rule (posbench/attention/linear.py):
the flash forward with its per-key slope mask and, where ``causal.blocked_backward_pays``, the
blocked GEMM backward (``core.key_bias``), against the float64 reference and the flash op's own
backward: float32 and float64, odd lengths, several backward blocks, one row, evaluation."""

import pytest
import torch

from posbench.attention import linear
from posbench.attention.linear import key_bias_flash, linear_bias_sdpa
from posbench.core import causal
from posbench.core.alibi_math import slopes_tensor
from posbench.core.cpu_flash import CPU_FLASH_WITH_MASK
from tests.helpers.attention import qkv, reference_attention

pytestmark = pytest.mark.skipif(CPU_FLASH_WITH_MASK is None, reason="torch's CPU flash op takes no attn_mask")


def alibi_inputs(t, dtype, seed, h=4, d=16):
    q, k, v = (x.requires_grad_() for x in qkv(t, t, h=h, d=d, seed=seed, dtype=dtype))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1)).to(dtype)
    return (q, k, v), dout


def alibi_reference(q, k, v, slopes, pos):
    bias = -slopes.double()[:, None, None] * (pos.double()[:, None] - pos.double()[None, :])  # (H, L, L)
    return reference_attention(q, k, v, bias)


def spy(monkeypatch, rule: bool | None = None):
    """The calls of the blocked backward's path; ``rule`` forces ``blocked_backward_pays``."""
    taken = []
    real = linear.key_bias_attention
    monkeypatch.setattr(linear, "key_bias_attention", lambda *a: taken.append(a[0].shape[-2]) or real(*a))
    if rule is not None:
        monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: rule)
    return taken


@pytest.mark.parametrize("t", [1, 7, 65, 150])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_the_blocked_backward_equals_the_reference_in_values_and_gradients(monkeypatch, t, dtype, tol, seed):
    taken = spy(monkeypatch, rule=True)
    (q, k, v), dout = alibi_inputs(t, dtype, seed)
    slopes, pos = slopes_tensor(4), torch.arange(t)
    got = linear_bias_sdpa(q, k, v, slopes, pos)
    grads = torch.autograd.grad(got, (q, k, v), dout)
    want = alibi_reference(q, k, v, slopes, pos)
    want_grads = torch.autograd.grad(want, (q, k, v), dout.double())
    assert taken == [t]
    torch.testing.assert_close(got.double(), want, atol=tol, rtol=tol)
    for name, g, w in zip("qkv", grads, want_grads):
        assert g.dtype == dtype, name
        torch.testing.assert_close(g.double(), w.double(), atol=tol, rtol=tol, msg=f"gradient of {name}")


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_the_rule_keeps_the_forward_bits_and_the_flash_ops_gradients(monkeypatch, dtype, tol):
    """The same flash forward either way (output bits equal); gradients within rounding of the
    flash op's own backward, at a length spanning several backward blocks."""
    (q, k, v), dout = alibi_inputs(197, dtype, 3, h=2, d=32)
    slopes, pos = slopes_tensor(2), torch.arange(197)
    spy(monkeypatch, rule=True)
    got = linear_bias_sdpa(q, k, v, slopes, pos)
    grads = torch.autograd.grad(got, (q, k, v), dout)
    rel = (pos - pos[pos.shape[0] // 2]).to(dtype)
    want = key_bias_flash(q, k, v, slopes.to(dtype)[:, None] * rel[None, :])
    want_grads = torch.autograd.grad(want, (q, k, v), dout)
    assert torch.equal(got, want)
    for g, w in zip(grads, want_grads):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


def test_the_rule_picks_the_lengths_and_skips_evaluation(monkeypatch):
    """L 512 (SDPA scores the whole square) takes the blocked backward, L 256 and 2048 the flash
    op's; evaluation and a forward whose inputs want no gradient take the flash op alone."""
    taken = spy(monkeypatch)
    slopes = slopes_tensor(2)
    for t in (256, 512, 2048):
        (q, k, v), _ = alibi_inputs(t, torch.float32, 0, h=2, d=8)
        linear_bias_sdpa(q, k, v, slopes, torch.arange(t)).sum().backward()
    assert taken == [512]
    (q, k, v), _ = alibi_inputs(512, torch.float32, 1, h=2, d=8)
    with torch.no_grad():
        linear_bias_sdpa(q, k, v, slopes, torch.arange(512))
    linear_bias_sdpa(q.detach(), k.detach(), v.detach(), slopes, torch.arange(512))
    assert taken == [512]


def test_alibi_through_the_model_takes_the_rule_at_512_and_matches_the_flash_ops_gradients(monkeypatch):
    """The alibi method end to end at L 512: the blocked backward runs, and every parameter's
    gradient equals the flash op's backward's within float32 rounding."""
    from tests.helpers.attention import method

    m = method("alibi")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 512, 16, generator=g).requires_grad_() for _ in range(3))
    pos = torch.arange(512)
    taken = spy(monkeypatch)
    state = m.prepare(pos, pos, torch.float32)  # the forward's plan: the linear one
    out = m.attend(q, k, v, pos, pos, 0, state=state)
    grads = torch.autograd.grad(out, (q, k, v), out.detach())
    assert taken == [512]
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: False)
    want = m.attend(q, k, v, pos, pos, 0, state=state)
    assert torch.equal(out, want)
    for a, b in zip(grads, torch.autograd.grad(want, (q, k, v), want.detach())):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=2e-5)

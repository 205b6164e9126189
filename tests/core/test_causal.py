"""Plain causal attention by the faster path per length: the rule (SDPA's share of the square, from
its kernel's block sizes), the blocked backward equal to SDPA's in values and gradients, and every
call the rule leaves to SDPA."""

import pytest
import torch
import torch.nn.functional as F

from posbench.attention.modifiers import SoftmaxSink
from posbench.core import causal, key_bias
from posbench.core.cpu_flash import CPU_FLASH_WITH_MASK
from posbench.core.masked import causal_attention
from tests.helpers.attention import qkv

needs_flash = pytest.mark.skipif(CPU_FLASH_WITH_MASK is None, reason="torch's CPU flash op takes no attn_mask")


def test_sdpa_square_share_follows_the_kernels_blocks():
    # query blocks of 64 below 768 against one key block of up to 512: the whole square
    assert causal.sdpa_square_share(256) == causal.sdpa_square_share(512) == 1.0
    assert causal.sdpa_square_share(1024) == 0.75  # blocks of 256: 512, 512, 1024, 1024 keys
    assert causal.sdpa_square_share(2048) == 0.625
    assert causal.sdpa_square_share(100) == 1.0  # query blocks of 32, one key block


def test_the_blocked_backward_is_taken_from_512_while_sdpa_scores_three_quarters():
    assert [causal.blocked_backward_pays(n) for n in (256, 511, 512, 767, 1024, 1536, 2048)] == [
        False,
        False,
        True,
        True,
        True,
        False,
        False,
    ]


def spy(monkeypatch):
    taken = []
    real = causal.causal_flash_attention
    monkeypatch.setattr(causal, "causal_flash_attention", lambda *a: taken.append(1) or real(*a))
    return taken


@needs_flash
@pytest.mark.parametrize("t", [1, 63, 130])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("seed", [0, 1])
def test_causal_sdpa_equals_sdpa_in_values_and_gradients(monkeypatch, t, dtype, tol, seed):
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: True)  # every length here
    taken = spy(monkeypatch)
    q, k, v = (x.requires_grad_() for x in qkv(t, t, h=3, d=16, seed=seed, dtype=dtype))
    dout = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    got = causal.causal_sdpa(q, k, v)
    grads = torch.autograd.grad(got, (q, k, v), dout)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    want_grads = torch.autograd.grad(want, (q, k, v), dout)
    assert taken == [1]
    assert torch.equal(got, want)  # the same flash forward: the same bits
    for g, w in zip(grads, want_grads):
        assert g.dtype == dtype
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)


@needs_flash
def test_a_model_length_takes_the_blocked_backward_and_others_take_sdpa(monkeypatch):
    taken = spy(monkeypatch)
    q, k, v = (x.requires_grad_() for x in qkv(512, 512, h=2, d=8))
    causal.causal_sdpa(q, k, v).sum().backward()
    assert taken == [1]
    short = [x.detach()[:, :, :256].requires_grad_() for x in (q, k, v)]
    long = [x.detach().repeat(1, 1, 4, 1).requires_grad_() for x in (q, k, v)]  # L 2048
    for args, window in ((short, None), (long, None), ((q, k, v), 100)):
        got = causal.causal_sdpa(*args, window=window)
        torch.testing.assert_close(got, causal_attention(*args, window=window))
    with torch.no_grad():
        causal.causal_sdpa(q, k, v)  # evaluation: SDPA's forward is all there is
    causal.causal_sdpa(q[:, :, -3:], k, v)  # decode rows: Tq < Tk
    with SoftmaxSink(torch.zeros(2)):  # a mode that reads SDPA's calls must see this one
        causal.causal_sdpa(q, k, v)
    assert taken == [1]


@needs_flash
def test_causal_flash_attention_backward_has_no_key_bias_gradient():
    (q, k, v) = qkv(9, 9, h=2, d=8, dtype=torch.float64)
    out, lse = key_bias.key_bias_forward(q, k, v, None)
    grads = key_bias.key_bias_backward(torch.ones_like(out), (q, k, v, None, out, lse))
    assert grads[3] is None and [g.shape for g in grads[:3]] == [q.shape] * 3


@needs_flash
def test_takes_blocked_is_the_rule_every_route_asks(monkeypatch):
    """One predicate for plain causal SDPA, ALiBi's linear plan and the sink: allowed here and
    paying at this length; under a torch function mode (the sink's) only the sink's own path."""
    from torch.overrides import TorchFunctionMode

    class Reading(TorchFunctionMode):  # a mode that reads every call and passes it on, as the sink's does
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    q, k, v = (x.requires_grad_() for x in qkv(512, 512, h=2, d=8))
    assert causal.takes_blocked(q, k, v) and causal.takes_blocked(q, k, v, sink_path=True)
    with Reading():
        assert not causal.takes_blocked(q, k, v) and causal.takes_blocked(q, k, v, sink_path=True)
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: False)
    assert not causal.takes_blocked(q, k, v, sink_path=True)
    short = [x.detach()[:, :, :256].requires_grad_() for x in (q, k, v)]
    monkeypatch.undo()
    assert not causal.takes_blocked(*short)  # L 256: SDPA's own backward

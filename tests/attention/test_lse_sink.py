"""The sink from the flash kernel's log-sum-exp (posbench/attention/lse_sink.py) against the
reference with one more key (``modifiers.sdpa_with_sink``): values and the gradients of q, k, v
and the sink logits, float64 and float32, odd lengths, decode rows, grouped key heads, masks,
values narrower than the keys."""

import pytest
import torch

from posbench.attention.lse_sink import flash_sink_sdpa
from posbench.attention.modifiers import sdpa_options, sdpa_with_sink
from posbench.core import cpu_flash

pytestmark = pytest.mark.skipif(cpu_flash.CPU_FLASH_WITH_MASK is None, reason="this torch has no CPU flash op")

TOL = {torch.float64: dict(rtol=1e-12, atol=1e-12), torch.float32: dict(rtol=1e-5, atol=1e-5)}
CASES = [
    # (Tq, Tk, key heads, value width, SDPA's mask options)
    (37, 37, 4, 16, "causal"),
    (1, 50, 4, 16, None),  # a decode row sees every key
    (5, 41, 2, 16, "bool"),  # rows at the end of the keys, grouped key heads
    (37, 37, 4, 32, "causal"),  # values wider than the keys (pope's are narrower: padded alike)
    (23, 23, 4, 8, "float"),  # a bias as a float mask, no gradient
    (5, 41, 4, 16, "causal"),  # SDPA's is_causal with Tq < Tk: top-left aligned
]


def mask_options(kind, tq, tk, dtype, g):
    if kind == "causal":
        return dict(is_causal=True)
    if kind == "bool":
        return dict(attn_mask=torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq))
    if kind == "float":
        return dict(attn_mask=torch.randn(4, tq, tk, generator=g, dtype=dtype))
    return {}


def assert_matches_reference(q, k, v, sink, options: dict, g) -> None:
    """``flash_sink_sdpa`` against ``sdpa_with_sink`` (the sink as one more key): values, and the
    gradients of q, k, v and the sink logits (each nonzero) for a random output gradient."""
    dtype = q.dtype
    got = flash_sink_sdpa(q, k, v, sink, sdpa_options(**options))
    want = sdpa_with_sink(q, k, v, sink=sink, **options)
    torch.testing.assert_close(got, want, **TOL[dtype])
    grad = torch.randn(want.shape, generator=g, dtype=dtype)
    got_grads = torch.autograd.grad((got * grad).sum(), (q, k, v, sink))
    want_grads = torch.autograd.grad((want * grad).sum(), (q, k, v, sink))
    for a, b in zip(got_grads, want_grads):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, **(TOL[dtype] if a.dtype == dtype else TOL[torch.float32]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tq,tk,kv_heads,dv,kind", CASES)
def test_flash_sink_equals_the_sink_key_reference(dtype, tq, tk, kv_heads, dv, kind):
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(2, 4, tq, 16, generator=g, dtype=dtype).requires_grad_()
        k = torch.randn(2, kv_heads, tk, 16, generator=g, dtype=dtype).requires_grad_()
        v = torch.randn(2, kv_heads, tk, dv, generator=g, dtype=dtype).requires_grad_()
        sink = torch.randn(4, generator=g).requires_grad_()  # float32, as the modifier's parameter
        options = mask_options(kind, tq, tk, dtype, g) | ({"enable_gqa": True} if kv_heads != 4 else {})
        assert_matches_reference(q, k, v, sink, options, g)


def test_where_the_flash_path_does_not_apply_it_says_none():
    q = torch.randn(1, 2, 4, 8)
    sink = torch.zeros(2)
    assert flash_sink_sdpa(q, q, q, sink, sdpa_options(dropout_p=0.1)) is None
    assert flash_sink_sdpa(q.bfloat16(), q.bfloat16(), q.bfloat16(), sink, sdpa_options()) is None
    learned = torch.zeros(4, 4, requires_grad=True)  # a bias that needs its gradient: the reference's
    assert flash_sink_sdpa(q, q, q, sink, sdpa_options(attn_mask=learned)) is None
    assert flash_sink_sdpa(q, q, q, sink, sdpa_options(is_causal=True)) is not None


BLOCKED_CASES = [
    # (L, key heads, value width, scale): every case causal, L queries against L keys, no mask
    (1, 4, 16, None),  # one row
    (37, 4, 16, None),
    (150, 2, 16, None),  # several backward blocks (64 rows), grouped key heads
    (65, 4, 8, None),  # values narrower than the keys (padded for the kernel, as pope's)
    (71, 4, 16, 0.3),  # a scale of the caller's own (ssmax, p_rope's scalings pass one)
]


def blocked_spy(monkeypatch, rule: bool | None = True):
    """The calls of the blocked backward from the sink's path; ``rule`` forces ``blocked_backward_pays``."""
    from posbench.attention import lse_sink
    from posbench.core import causal

    taken = []
    real = lse_sink.key_bias_backward
    monkeypatch.setattr(lse_sink, "key_bias_backward", lambda *a, **kw: taken.append(a[1][0].shape[-2]) or real(*a, **kw))
    if rule is not None:
        monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: rule)
    return taken


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("t,kv_heads,dv,scale", BLOCKED_CASES)
def test_the_sinks_blocked_backward_equals_the_sink_key_reference(monkeypatch, dtype, t, kv_heads, dv, scale):
    """The sink's causal path with the blocked backward (the rule forced at every length here)
    against the reference in values and every gradient, the sink logits' included."""
    taken = blocked_spy(monkeypatch)
    for seed in (0, 1):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(2, 4, t, 16, generator=g, dtype=dtype).requires_grad_()
        k = torch.randn(2, kv_heads, t, 16, generator=g, dtype=dtype).requires_grad_()
        v = torch.randn(2, kv_heads, t, dv, generator=g, dtype=dtype).requires_grad_()
        sink = torch.randn(4, generator=g).requires_grad_()
        options = dict(is_causal=True, scale=scale) | ({"enable_gqa": True} if kv_heads != 4 else {})
        assert_matches_reference(q, k, v, sink, options, g)
    assert taken == [t, t]


def test_the_sink_takes_the_rule_by_length_and_keeps_its_forward_bits(monkeypatch):
    """L 512 takes the blocked backward, L 256 and 2048 the flash op's; a mask, Tq < Tk and
    evaluation never do. The forward is the flash op's either way: the same bits."""
    from posbench.core import causal

    taken = blocked_spy(monkeypatch, rule=None)
    sink = torch.randn(2, generator=torch.Generator().manual_seed(0)).requires_grad_()
    outs = {}
    for t in (256, 512, 2048):
        q, k, v = (torch.randn(1, 2, t, 8, generator=torch.Generator().manual_seed(t)).requires_grad_() for _ in range(3))
        outs[t] = flash_sink_sdpa(q, k, v, sink, sdpa_options(is_causal=True))
        outs[t].sum().backward()
    assert taken == [512]
    q, k, v = (torch.randn(1, 2, 512, 8, generator=torch.Generator().manual_seed(512)).requires_grad_() for _ in range(3))
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: False)
    assert torch.equal(flash_sink_sdpa(q, k, v, sink, sdpa_options(is_causal=True)), outs[512])
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: True)
    mask = torch.ones(512, 512, dtype=torch.bool).tril()
    flash_sink_sdpa(q, k, v, sink, sdpa_options(attn_mask=mask)).sum().backward()
    flash_sink_sdpa(q[:, :, -5:], k, v, sink, sdpa_options(is_causal=True)).sum().backward()
    with torch.no_grad():
        flash_sink_sdpa(q, k, v, sink, sdpa_options(is_causal=True))
    assert taken == [512]

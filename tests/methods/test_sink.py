"""The sink modifier (methods/sink.py): softmax weights computed by hand, on rotary against a
reference with one more key, and where it is unavailable."""

import math

import pytest
import torch

from posbench.core import causal, registry
from tests.helpers.attention import method, qkv, reference_attention
from tests.helpers.methods import one_head


def test_sink_adds_exp_s_to_the_softmax_denominator():
    # q = 0: every score 0; s = ln 2, so the sink weighs 2 against 1 per key.
    # Query 0 (1 key): weight 1/3. Query 2 (3 keys): 1/5 each, 2/5 to the sink (value 0).
    m = one_head("nope+sink", sink_init=math.log(2))
    q, k = torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2)
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])
    pos = torch.arange(3)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0]
    torch.testing.assert_close(out[0], torch.tensor([1 / 3, 0.0]))
    torch.testing.assert_close(out[1], torch.tensor([1 / 4, 1 / 4]))
    torch.testing.assert_close(out[2], torch.tensor([2 / 5, 2 / 5]))
    torch.testing.assert_close(m.attend(q[:, :, 2:], k, v, pos[2:], pos, 0)[0, 0, 0], out[2])


def test_sink_on_rotary_matches_a_reference_with_one_more_key():
    m = method("rotary+sink")
    with torch.no_grad():
        m.sink_logit.normal_(0.0, 1.0)
    q, k, v = qkv(6, 6)
    pos = torch.arange(6)
    got = m.attend(q, k, v, pos, pos, 1)
    # the rotated scores with a sink column: append a key of score s_h and value 0
    plain = method("rotary")
    cos, sin = plain._cos_sin(pos, torch.float32)
    qr, kr = plain.rotate(q, cos, sin).double(), plain.rotate(k, cos, sin).double()
    scores = (qr @ kr.transpose(-1, -2) / 4.0).masked_fill(torch.ones(6, 6, dtype=torch.bool).triu(1), float("-inf"))
    sink = m.sink_logit[1].double().view(1, 4, 1, 1).expand(2, 4, 6, 1)
    w = torch.cat([scores, sink], -1).softmax(-1)[..., :-1]
    torch.testing.assert_close(got.double(), w @ v.double(), atol=1e-5, rtol=1e-5)
    assert reference_attention(q, k, v).shape == got.shape


def test_sink_is_unavailable_where_attention_drops_a_per_query_constant():
    for name in ("fox+sink", "alibi+sink"):
        reason = registry.get(name).unavailable("cpu", torch.float32)
        assert reason and "drops a per-query constant" in reason, name


def test_on_a_cpu_the_sink_rides_the_flash_kernel_and_equals_the_sink_key(monkeypatch):
    from posbench.core import cpu_flash

    if cpu_flash.CPU_FLASH_WITH_MASK is None:
        pytest.skip("this torch has no CPU flash op: the reference only")
    m = method("rotary+sink")
    # the sink's flash path takes plain causal attention's rule for its backward: the label names it
    assert m.attn_backend("cpu", torch.float32) == causal.BACKEND + " + sink from the flash log-sum-exp"
    with torch.no_grad():
        m.sink_logit.normal_(0.0, 1.0)
    q, k, v = (x.double().requires_grad_() for x in qkv(37, 37))
    pos = torch.arange(37)

    def run():
        out = m.attend(q, k, v, pos, pos, 2)
        grads = torch.autograd.grad(out.square().sum(), (q, k, v, m.sink_logit))
        return out, grads

    fast, fast_grads = run()
    monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", None)  # the sink key on SDPA, as off a CPU
    assert m.attn_backend("cpu", torch.float32).endswith("+ sink key (float mask)")
    ref, ref_grads = run()
    torch.testing.assert_close(fast, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(fast_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert fast_grads[3][2].abs().min() > 0 and not fast_grads[3][0].any()  # layer 2's logits only


def test_on_a_cpu_the_sink_takes_the_blocked_backward_where_the_rule_does(monkeypatch):
    """rotary+sink at L 512 (SDPA's backward would score the whole square): the sink's flash path
    runs the blocked GEMM backward, as rotary alone does, with the flash op's gradients."""
    from posbench.attention import lse_sink
    from posbench.core import cpu_flash

    if cpu_flash.CPU_FLASH_WITH_MASK is None:
        pytest.skip("this torch has no CPU flash op: the reference only")
    m = method("rotary+sink")
    q, k, v = (x.requires_grad_() for x in qkv(512, 512, seed=3))
    pos = torch.arange(512)
    taken = []
    real = lse_sink.key_bias_backward
    monkeypatch.setattr(lse_sink, "key_bias_backward", lambda *a, **kw: taken.append(1) or real(*a, **kw))

    def run():
        out = m.attend(q, k, v, pos, pos, 0)
        return out, torch.autograd.grad(out.square().sum(), (q, k, v, m.sink_logit))

    out, grads = run()
    assert taken == [1]
    monkeypatch.setattr(causal, "blocked_backward_pays", lambda length: False)
    want, want_grads = run()
    assert taken == [1] and torch.equal(out, want)
    for a, b in zip(grads, want_grads):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5)

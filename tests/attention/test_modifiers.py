"""What the attention modifiers share (posbench/attention/modifiers.py): a composed method calls its
base's hooks on what the modifiers hand it, and takes the base's options and each modifier's."""

import pytest
import torch

from posbench.core import registry
from tests.helpers.attention import method, qkv


def test_rotary_qknorm_gate_is_rotary_on_normalized_q_k_times_the_gate():
    composed, plain = method("rotary+qknorm+gate"), method("rotary")
    with torch.no_grad():
        composed.qk_gain.normal_(1.0, 0.3)
        composed.out_gate_b.normal_(0.0, 1.0)
    q, k, v = qkv(5, 8)
    pos, layer = torch.arange(8), 2
    g = composed.qk_gain[layer]

    def norm(x, gain):
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + 1e-6) * gain

    gate_logit = v[:, :, 3:].transpose(1, 2).reshape(2, 5, -1) @ composed.out_gate_w[layer].t() + composed.out_gate_b[layer]
    want = (
        plain.attend(norm(q, g[0]), norm(k, g[1]), v, pos[3:], pos, layer) * torch.sigmoid(gate_logit).transpose(1, 2)[..., None]
    )
    torch.testing.assert_close(composed.attend(q, k, v, pos[3:], pos, layer), want, atol=1e-5, rtol=1e-5)


def test_composed_options_are_the_base_options_and_each_modifiers():
    m = method("rotary+ssmax+qknorm+sink+gate", base=500.0, s_init=0.3, qknorm_eps=1e-5, sink_init=-1.0, out_gate_bias=2.0)
    assert (m.base, m.qknorm_eps) == (500.0, 1e-5)
    assert torch.equal(m.sink_logit, torch.full((4, 4), -1.0)) and torch.equal(m.out_gate_b, torch.full((4, 4), 2.0))
    assert registry.get("rotary+ssmax+qknorm+sink+gate").modifiers == ("ssmax", "qknorm", "sink", "gate")
    for bad, message in [
        (dict(sink_init=float("nan")), "sink_init must be a finite number"),
        (dict(qknorm_eps=0), r"qknorm_eps must be a number in \(0, 1\)"),
        (dict(out_gate_bias="x"), "out_gate_bias must be a number"),
    ]:
        with pytest.raises(ValueError, match=message):
            method("rotary+ssmax+qknorm+sink+gate", **bad)

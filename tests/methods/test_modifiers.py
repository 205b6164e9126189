"""The modifiers gate, sink and qknorm (methods/gate.py, sink.py, qknorm.py): weights computed by
hand, the fixed order in which modifiers compose, and the compositions the suites name passing
the conformance kit."""

import math

import pytest
import torch
import yaml

from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.run.suite.loading import SUITES_DIR
from tests.helpers.attention import method, qkv, reference_attention


def tiny(name, **options):
    """One layer, one head of dimension 2."""
    return registry.build(ModelConfig(d_model=2, n_heads=1, n_layers=1, method=name, method_options=options))


def test_gate_scales_each_querys_output_by_the_sigmoid_of_its_own_values():
    # q = 0: uniform weights. w = [1, 0], b = 0; v_0 = [ln 3, 0], v_1 = 0.
    # Query 0: o = v_0, gate sigmoid(ln 3) = 3/4. Query 1: o = v_0 / 2, gate sigmoid(0) = 1/2.
    m = tiny("nope+gate")
    with torch.no_grad():
        m.out_gate_w.copy_(torch.tensor([[[1.0, 0.0]]]))
        m.out_gate_b.zero_()
    q, k = torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2)
    v = torch.tensor([[[[math.log(3), 0.0], [0.0, 0.0]]]])
    pos = torch.arange(2)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0]
    torch.testing.assert_close(out, torch.tensor([[0.75 * math.log(3), 0.0], [0.25 * math.log(3), 0.0]]))
    # a decode step: the query's values are the cache's last row
    torch.testing.assert_close(m.attend(q[:, :, 1:], k, v, pos[1:], pos, 0)[0, 0, 0], out[1])


def test_sink_adds_exp_s_to_the_softmax_denominator():
    # q = 0: every score 0; s = ln 2, so the sink weighs 2 against 1 per key.
    # Query 0 (1 key): weight 1/3. Query 2 (3 keys): 1/5 each, 2/5 to the sink (value 0).
    m = tiny("nope+sink", sink_init=math.log(2))
    q, k = torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2)
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]])
    pos = torch.arange(3)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0]
    torch.testing.assert_close(out[0], torch.tensor([1 / 3, 0.0]))
    torch.testing.assert_close(out[1], torch.tensor([1 / 4, 1 / 4]))
    torch.testing.assert_close(out[2], torch.tensor([2 / 5, 2 / 5]))
    torch.testing.assert_close(m.attend(q[:, :, 2:], k, v, pos[2:], pos, 0)[0, 0, 0], out[2])


def test_qknorm_normalizes_each_head_to_rms_one_times_its_gain():
    # q = [3, 4] has rms 5 / sqrt 2: normalized [3, 4] sqrt 2 / 5. k_0 = 7 [4, -3] (orthogonal to q:
    # score 0), k_1 = 0.1 [3, 4]: normalized like q, q.k / sqrt 2 = 2 / sqrt 2 = sqrt 2.
    # Query 1 weighs [1, e^sqrt2] / (1 + e^sqrt2); gains g_q = 2: the score doubles.
    m = tiny("nope+qknorm")
    q = torch.tensor([3.0, 4.0]).expand(1, 1, 2, 2)
    k = torch.tensor([[[[28.0, -21.0], [0.3, 0.4]]]])
    v = torch.eye(2)[None, None]
    pos = torch.arange(2)
    e = math.exp(math.sqrt(2))
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0)[0, 0, 1], torch.tensor([1, e]) / (1 + e))
    with torch.no_grad():
        m.qk_gain[0, 0].fill_(2.0)
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0)[0, 0, 1], torch.tensor([1, e * e]) / (1 + e * e))


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


@pytest.mark.parametrize(
    "name,allowed",
    [
        ("rotary+gate+qknorm", "rotary+qknorm+gate"),
        ("rotary+qknorm+ssmax", "rotary+ssmax+qknorm"),
        ("nope+sink+gate+gate", "nope+sink+gate"),
        ("alibi+gate+gate", "alibi+gate"),
    ],
)
def test_modifiers_compose_in_one_fixed_order(name, allowed):
    with pytest.raises(registry.RegistryError) as exc:
        registry.get(name)
    assert str(exc.value) == (
        f"unknown method {name!r}: modifiers compose once each, in the order ssmax, qknorm, sink, gate; allowed: {allowed}"
    )
    assert registry.get(allowed).name == allowed


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


def _suite_compositions() -> list[str]:
    """Every composed name a suite file or one of its profiles lists."""
    names = set()
    for path in SUITES_DIR.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for holder in [data, *(data.get("profiles") or {}).values()]:
            methods = holder.get("methods") or []
            names |= {m for m in (methods if isinstance(methods, list) else []) if "+" in m}
    return sorted(names)


@pytest.mark.parametrize("name", _suite_compositions() + ["rotary+qknorm+gate"])
def test_compositions_the_suites_name_pass_the_kit(name):
    for check, fn in testing.CHECKS.items():
        if testing.unavailable(name, torch.float32) is None:
            fn(name, torch.float32, "cpu")

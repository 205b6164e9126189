"""The gate modifier (methods/gate.py): output gates computed by hand."""

import math

import pytest
import torch

from posbench.core.method import ModelConfig
from posbench.core.registry import build
from tests.helpers.attention import qkv
from tests.helpers.methods import one_head


def test_gate_scales_each_querys_output_by_the_sigmoid_of_its_own_values():
    # q = 0: uniform weights. w = [1, 0], b = 0; v_0 = [ln 3, 0], v_1 = 0.
    # Query 0: o = v_0, gate sigmoid(ln 3) = 3/4. Query 1: o = v_0 / 2, gate sigmoid(0) = 1/2.
    m = one_head("nope+gate")
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


def test_elementwise_gate_scales_each_channel_by_its_own_sigmoid():
    # hd 2: w = [[1, 0], [0, 2]] (channel 0 reads v[0], channel 1 reads 2 v[1]), b = [0, ln 3].
    # One key: o = v = [ln 3, 0.5]; gates sigmoid(ln 3) = 3/4 and sigmoid(1 + ln 3) on channel 1.
    m = one_head("nope+gate", gate="elementwise")
    assert m.out_gate_w.shape == (1, 2, 2) and "elementwise" in m.attn_backend("cpu", torch.float32)
    with torch.no_grad():
        m.out_gate_w.copy_(torch.tensor([[[1.0, 0.0], [0.0, 2.0]]]))
        m.out_gate_b.copy_(torch.tensor([[0.0, math.log(3)]]))
    v = torch.tensor([[[[math.log(3), 0.5]]]])
    out = m.attend(torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), v, torch.arange(1), torch.arange(1), 0)
    sig = 1 / (1 + math.exp(-(1 + math.log(3))))
    torch.testing.assert_close(out[0, 0, 0], torch.tensor([0.75 * math.log(3), 0.5 * sig]))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_elementwise_gate_equals_a_plain_reference(kv_heads, dtype):
    # the gate reads the values of every key head of the query's own token (Hkv * hd numbers) and
    # gives every channel of every query head its gate; GQA (values expanded to 4 heads), decode rows
    cfg = ModelConfig(
        d_model=64, n_heads=4, n_layers=2, n_kv_heads=kv_heads, method="nope+gate", method_options={"gate": "elementwise"}
    )
    m = build(cfg).to(dtype)
    with torch.no_grad():
        m.out_gate_b.normal_()
    q, k, v = qkv(5, 9, dtype=dtype)
    group = 4 // kv_heads
    v = v[:, :kv_heads].repeat_interleave(group, 1)  # (B, 4, 9, 16): key head h // G copied
    pos = torch.arange(9)
    got = m.attend(q, k, v, pos[4:], pos, 1)
    x = v[:, ::group, 4:].transpose(1, 2).reshape(2, 5, kv_heads * 16).double()  # (B, Tq, Hkv * hd)
    gates = torch.sigmoid(x @ m.out_gate_w[1].double().t() + m.out_gate_b[1].double())  # (B, Tq, H * hd)
    plain = torch.nn.functional.scaled_dot_product_attention(
        q.double(), k.double(), v.double(), attn_mask=torch.ones(5, 9, dtype=torch.bool).tril(4)
    )
    want = plain * gates.view(2, 5, 4, 16).transpose(1, 2)
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got.double(), want, **tol)


def test_gate_option_is_checked_in_one_line():
    with pytest.raises(ValueError, match=r"^nope\+gate: gate must be one of headwise, elementwise, got 'channel'$"):
        one_head("nope+gate", gate="channel")


def test_elementwise_gate_passes_the_conformance_kit():
    # the kit builds methods by name without options: a registered subclass whose default is elementwise
    from posbench.core import conformance as testing
    from posbench.core import registry

    base = registry.get("rotary+gate")

    class ElementwiseGate(base):
        name = "rotary_elementwise_gate_kit"

        def __init__(self, cfg, **options):
            super().__init__(cfg, **{"gate": "elementwise", **options})

    registry.register(ElementwiseGate)
    try:
        assert testing.build(ElementwiseGate.name).method.gate == "elementwise"
        for fn in testing.CHECKS.values():
            fn(ElementwiseGate.name, torch.float32, "cpu")
    finally:
        registry.unregister(ElementwiseGate.name)

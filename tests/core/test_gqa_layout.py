"""Grouped-query attention in the shared model (``ModelConfig.n_kv_heads``; issue 40): query head h
reads key/value head h // (H / Hkv), the KV cache holds Hkv heads, every method takes the layout
(the conformance kit's ``gqa`` check), and a bad setting is one line."""

from __future__ import annotations

import pytest
import torch

from posbench.core.config import ModelConfig
from posbench.core.model import build_model


def _model(method="alibi", **layout):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, n_layers=2, d_model=64, n_heads=4, d_ff=96, method=method, **layout)
    return build_model(cfg).eval()


@pytest.mark.parametrize("value", [3, 0, -2, 8, 2.0, True, "2"])
def test_a_bad_n_kv_heads_is_one_line_naming_what_is_allowed(value):
    with pytest.raises(ValueError) as err:
        ModelConfig(n_heads=4, n_kv_heads=value)
    assert str(err.value) == (
        f"model config: n_kv_heads ({value!r}) must be a positive integer dividing n_heads (4); "
        "allowed: a divisor of n_heads (1 = multi-query) or null"
    )


def test_n_kv_heads_equal_to_n_heads_is_plain_multi_head_attention_bit_for_bit():
    mha, same = _model(), _model(n_kv_heads=4)
    idx = torch.randint(0, 50, (2, 21))
    with torch.no_grad():
        assert torch.equal(mha(idx), same(idx))
    assert [p.shape for p in mha.parameters()] == [p.shape for p in same.parameters()]


def _copy_shared_heads(gqa, mha, kv, hd=16, d=64):
    """Set the MHA model's key/value projections to repeat each of the GQA model's shared heads
    for the H / Hkv query heads of its group (queries copied as they are)."""
    group = 4 // kv
    for a, b in zip(gqa.blocks, mha.blocks):
        w, bias = a.qkv.weight, a.qkv.bias  # (d + 2 kv hd, d)
        parts_w = [w[:d]] + [
            w[d + i * kv * hd : d + (i + 1) * kv * hd].view(kv, hd, d).repeat_interleave(group, 0).reshape(d, d) for i in range(2)
        ]
        parts_b = [bias[:d]] + [
            bias[d + i * kv * hd : d + (i + 1) * kv * hd].view(kv, hd).repeat_interleave(group, 0).reshape(d) for i in range(2)
        ]
        b.qkv.weight.copy_(torch.cat(parts_w))
        b.qkv.bias.copy_(torch.cat(parts_b))


@pytest.mark.parametrize("method", ["alibi", "rotary", "sinusoidal", "t5_bias"])
@pytest.mark.parametrize("kv", [1, 2])
def test_gqa_equals_multi_head_attention_with_each_kv_head_copied_to_its_group(method, kv):
    # The reference: an MHA model whose key/value projections repeat each shared head for the
    # H / Hkv query heads of its group. Same weights otherwise: the logits must agree.
    gqa, mha = _model(method, n_kv_heads=kv), _model(method)
    with torch.no_grad():
        mha.load_state_dict({k: v for k, v in gqa.state_dict().items() if "qkv" not in k}, strict=False)
        _copy_shared_heads(gqa, mha, kv)
        idx = torch.randint(0, 50, (2, 19))
        assert torch.allclose(gqa(idx), mha(idx), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kv", [1, 2])
def test_the_kv_cache_holds_the_kv_heads_only(kv):
    model, mha = _model(n_kv_heads=kv), _model()
    idx = torch.randint(0, 50, (1, 12))
    caches = []
    for m in (model, mha):
        cache = m.new_cache()
        with torch.no_grad():
            m(idx, cache=cache)
        caches.append(cache)
    assert {k.shape[1] for k, _ in caches[0].layers()} == {kv}
    assert caches[0].nbytes() * (4 // kv) == caches[1].nbytes()


@pytest.mark.parametrize("kv", [1, 2])
def test_fox_under_gqa_equals_multi_head_fox_with_each_kv_head_copied_and_its_gates_per_query_head(kv):
    # fox's gate per query head reads the raw keys of every key head. The MHA reference copies
    # each shared key/value head to its group, and its gate weights read the first copy only.
    gqa, mha = _model("fox", n_kv_heads=kv), _model("fox")
    hd, group = 16, 4 // kv
    with torch.no_grad():
        mha.load_state_dict({k: v for k, v in gqa.state_dict().items() if "qkv" not in k and "gate_w" not in k}, strict=False)
        _copy_shared_heads(gqa, mha, kv)
        gate = torch.zeros_like(mha.method.gate_w).view(2, 4, 4, hd)  # (L, H, key head, hd)
        gate[:, :, ::group] = gqa.method.gate_w.view(2, 4, kv, hd)
        mha.method.gate_w.copy_(gate.view(2, 4, 4 * hd))
        mha.method.gate_b.copy_(gqa.method.gate_b)
        idx = torch.randint(0, 50, (2, 19))
        assert torch.allclose(gqa(idx), mha(idx), atol=1e-5, rtol=1e-5)
        # the cache holds Hkv key heads, each carrying its G query heads' gates: one float per
        # cached key and query head beside the keys
        cache = gqa.new_cache()
        gqa(idx, cache=cache)
        keys = [k for k, _ in cache.layers()]
        assert {tuple(k.shape) for k in keys} == {(2, kv, 19, hd + group)}


def test_a_suite_takes_n_kv_heads_from_the_command_line_and_refuses_a_bad_one_before_running(tmp_path):
    from posbench.run.suite import SuiteError, load, parse_set, resolve

    suite = resolve(load("extrapolation"), "cpu", parse_set(["model_overrides.n_kv_heads=2"]))
    assert suite.settings.model_overrides["n_kv_heads"] == 2
    with pytest.raises(SuiteError) as err:
        resolve(load("extrapolation"), "cpu", parse_set(["model_overrides.n_kv_heads=3"]))
    assert str(err.value) == (
        "--set model_overrides.n_kv_heads: model_overrides.n_kv_heads: n_kv_heads (3) must be a "
        "positive integer dividing n_heads (4); allowed: a divisor of n_heads (1 = multi-query) or null"
    )

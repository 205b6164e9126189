"""The base model every method shares (fairseq's transformer_lm, the ALiBi paper's): token scale,
the balance of position and token signal at initialisation, and the numeric care of the shared
attention helpers."""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import platform
import sys
from pathlib import Path

import pytest
import torch
import torch._dynamo

from posbench.attention import blocked
from posbench.core import registry
from posbench.core.config import ModelConfig
from posbench.core.masked import explicit_attention, mask_bias
from posbench.core.model import KVCache, TransformerLM, build_model, lm_loss, model_config
from posbench.core.outcome import Unavailable
from posbench.triton_kernels import FusedKernelMethod
from tests.helpers.bias_plugins import PLUGINS

CPU_METHODS = [m for m in registry.names() if registry.get(m).unavailable(torch.device("cpu"), torch.float32) is None]


def test_token_embeddings_enter_at_unit_scale():
    for preset in ("tiny", "small"):
        model = build_model(model_config(preset, "nope"))
        d = model.cfg.d_model
        assert model.cfg.token_scale == pytest.approx(math.sqrt(d))
        assert model.tok.weight.std().item() == pytest.approx(d**-0.5, rel=0.05)
        idx = torch.randint(0, model.cfg.vocab_size, (4, 64))
        x = model.tok(idx) * model.cfg.token_scale
        assert x.pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.05)


def test_embed_scale_is_configurable_and_validated():
    assert ModelConfig(embed_scale=1.0).token_scale == 1.0
    with pytest.raises(ValueError, match="embed_scale must be a positive number"):
        ModelConfig(embed_scale=0)


@pytest.mark.parametrize("method", CPU_METHODS)
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_position_signal_below_token_signal_at_init(method, preset):
    """A method that adds to the embeddings must not drown the tokens (fairseq: ratio ~0.7 for
    sinusoidal); before the fix it was ~35 and two tokens at one position looked alike."""
    torch.manual_seed(0)
    model = build_model(model_config(preset, method))
    idx = torch.randint(0, model.cfg.vocab_size, (2, 512))
    x = model.tok(idx) * model.cfg.token_scale  # (B, T, D)
    with torch.no_grad():
        added = model.method.embed(x, model.positions(0, 512, "cpu")) - x
    ratio = added.pow(2).mean().sqrt().item() / x.pow(2).mean().sqrt().item()
    assert ratio < 1.0, f"{method}: position/token signal ratio {ratio:.2f} at init"
    if method == "sinusoidal":
        assert ratio == pytest.approx(math.sqrt(0.5), rel=0.05)  # sin/cos of amplitude 1: rms 1/sqrt(2)


def test_model_info_names_scale_and_attention_path(monkeypatch):
    from posbench.attention import flex

    model = build_model(model_config("tiny", "alibi"))
    info = model.info("cpu", torch.float32)
    assert info == {
        "embed_scale": "11.3137",
        "attn_backend": (
            "sdpa flash causal + per-key slope mask (linear bias, no L x L; backward by 64-query blocks where SDPA's "
            "covers >= 75% of the square, L >= 512)"
        ),
        "compute_dtype": "float32",
    }
    compute = build_model(model_config("tiny", "alibi", method_options={"bias_dtype": "compute"}))
    # a GPU with FlexAttention: the float32 bias as a linear score_mod; rounded to bf16, one row
    monkeypatch.setattr(flex, "flex_available", lambda device: torch.device(device).type == "cuda")
    assert model.info("cuda", torch.bfloat16)["attn_backend"] == "flex_attention, linear score_mod (no L x L)"
    assert compute.info("cuda", torch.bfloat16)["attn_backend"] == "flex_attention, distance-row score_mod (no L x L)"
    # without it: the masked bias
    monkeypatch.setattr(flex, "flex_available", lambda device: False)
    assert "explicit" in model.info("cuda", torch.bfloat16)["attn_backend"]
    assert compute.info("cuda", torch.bfloat16)["attn_backend"] == "sdpa + bfloat16 bias"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tq, tk", [(37, 37), (5, 41)])
def test_explicit_attention_takes_half_precision_products_in_float32(seed, tq, tk):
    """Large scores (|q.k|/sqrt(d) ~ 30) in bfloat16 round by ~0.1, which moves a softmax by a
    lot; the float32 product keeps the error at the inputs' own rounding."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, 64, generator=g) * 2.5 for n in (tq, tk, tk))
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    bias = mask_bias(-0.1 * torch.rand(3, tq, tk, generator=g))[None]  # (1, H, Tq, Tk) float32
    scores = q.double() @ k.double().transpose(-2, -1) / 8.0 + bias.double()
    want = torch.softmax(scores, dim=-1) @ v.double()
    err = (explicit_attention(q, k, v, bias).double() - want).abs().max().item()
    # The old way (product rounded to bfloat16 before the bias) is measurably worse here.
    rounded = (q @ k.transpose(-2, -1)).float() / 8.0 + bias
    old = (torch.softmax(rounded, dim=-1).bfloat16() @ v).double()
    old_err = (old - want).abs().max().item()
    assert err < 0.05 and err < old_err / 2, (err, old_err)


def test_the_model_takes_a_built_method_and_build_model_keeps_the_seeded_weights():
    """``TransformerLM(method)`` runs any built method, registered or not; ``build_model(cfg)``
    builds ``cfg.method`` by name and, under one seed, gives the same weights each time."""
    from posbench.core.model import TransformerLM

    cfg = model_config("tiny", "alibi", n_layers=1)
    model = TransformerLM(registry.build(cfg))
    assert model.cfg == cfg and model.method.cfg == cfg
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, cfg.vocab_size)
    torch.manual_seed(3)
    a = build_model(model_config("tiny", "kerple_log", n_layers=1))
    torch.manual_seed(3)
    b = build_model(model_config("tiny", "kerple_log", n_layers=1))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# --------------------------------------------------------------------------------------------------
# The KV cache and the per-forward method pipeline (prepare, encode_qk, attend) that fills it.


def _chunk(t, b=2, h=3, hd=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, t, hd, generator=g), torch.randn(b, h, t, hd, generator=g)


def test_cache_appends_in_place_within_capacity_and_returns_views_of_what_it_holds():
    cache = KVCache(n_layers=2, capacity=10)
    k0, v0 = _chunk(6)
    k, v = cache.append(0, k0, v0, 0)
    buf = cache._k[0]
    assert buf.shape == (2, 3, 10, 4) and k.shape == (2, 3, 6, 4) and k.data_ptr() == buf.data_ptr()
    k1, v1 = _chunk(1, seed=1)
    k, v = cache.append(0, k1, v1, 6)
    assert cache._k[0] is buf  # one slot written, nothing copied
    assert torch.equal(k, torch.cat([k0, k1], 2)) and torch.equal(v, torch.cat([v0, v1], 2))


def test_cache_grows_by_doubling_and_keeps_its_contents():
    cache = KVCache(n_layers=1)
    chunks = [_chunk(5, seed=0)] + [_chunk(1, seed=s) for s in range(1, 9)]
    sizes, start = [], 0
    for k, v in chunks:
        out_k, out_v = cache.append(0, k, v, start)
        start += k.shape[2]
        sizes.append(cache._k[0].shape[2])
    assert sizes == [5, 10, 10, 10, 10, 10, 20, 20, 20]
    assert torch.equal(out_k, torch.cat([c[0] for c in chunks], 2))
    assert torch.equal(out_v, torch.cat([c[1] for c in chunks], 2))


def test_cache_rejects_a_chunk_of_another_batch_in_one_line():
    cache = KVCache(n_layers=1)
    cache.append(0, *_chunk(3), 0)
    with pytest.raises(
        ValueError,
        match=r"^KVCache: a chunk of shape \(4, 3, 1, 4\) after chunks of batch and heads "
        r"\(2, 3\); allowed: the same \(B, H\) in every call$",
    ):
        cache.append(0, *_chunk(1, b=4), 3)


def test_cache_with_gradients_concatenates_so_backward_still_works():
    cache = KVCache(n_layers=1, capacity=8)
    k0, v0 = (t.requires_grad_() for t in _chunk(3))
    k1, v1 = (t.requires_grad_() for t in _chunk(2, seed=1))
    a, _ = cache.append(0, k0, v0, 0)
    b, vb = cache.append(0, k1, v1, 3)
    (a.sum() + (b * vb).sum()).backward()  # an in-place buffer would fail: "modified by an inplace operation"
    assert torch.equal(k0.grad, 1 + v0.detach()) and torch.equal(k1.grad, v1.detach())


def test_fork_is_independent_of_the_trunk():
    model = build_model(model_config("tiny", "rotary", n_layers=2)).eval()
    idx = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        trunk = model.new_cache(capacity=64)
        model(idx[:, :8], cache=trunk)
        branch = trunk.fork()
        model(idx[:, 8:10], cache=branch)  # writes slots 8, 9 of the branch only
        after_trunk = model(idx[:, 8:12], cache=trunk)
        full = model(idx)
    assert branch.length == 10 and trunk.length == 12
    torch.testing.assert_close(after_trunk, full[:, 8:])
    assert trunk.nbytes() == 2 * 2 * (2 * 4 * 12 * 32) * 4  # layers * (k, v) * (B H T hd) * float32


@pytest.mark.parametrize("method", ["sinusoidal", "rotary", "alibi", "t5_bias", "xpos", "rotary_dynamic_ntk"])
def test_decoding_through_a_preallocated_cache_equals_the_full_forward(method):
    model = build_model(model_config("tiny", method, n_layers=2)).eval()
    idx = torch.randint(0, 256, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache(capacity=40)
        parts = [model(idx[:, :17], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(17, 40)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-4)
    assert cache._k[0].shape[2] == 40  # never grew


def test_rotary_rotates_only_the_new_key_per_decode_step(monkeypatch):
    # The cache holds rotated keys, so a decode step rotates one query and one key (T = 1), and
    # the positions stay slices of the model's one arange (no concatenation per step).
    rows = []
    model = build_model(model_config("tiny", "rotary", n_layers=3)).eval()
    rotary_module = sys.modules[type(model.method).__module__]  # the module object the registry loaded
    real = rotary_module._rotated
    monkeypatch.setattr(rotary_module, "_rotated", lambda x, cos, sin, sign: rows.append(x.shape[-2]) or real(x, cos, sin, sign))
    idx = torch.randint(0, 256, (1, 30))
    with torch.no_grad():
        cache = model.new_cache()
        model(idx[:, :25], cache=cache)
        assert rows == [25] * 6  # q and k of 3 layers
        rows.clear()
        for t in range(25, 30):
            model(idx[:, t : t + 1], cache=cache)
    assert rows == [1] * 6 * 5
    assert cache.pos.data_ptr() == model.positions(0, 1, "cpu").data_ptr()


def test_dynamic_rotary_keeps_raw_keys_and_rotates_them_with_the_current_length(monkeypatch):
    # Seeded: unseeded, 1 draw in 40 differed by 1.2e-4 (float32 rounding of the two paths); a
    # wrong rotation of a cached key differs by O(1).
    torch.manual_seed(0)
    model = build_model(model_config("tiny", "rotary_dynamic_ntk", n_layers=1)).eval()
    model.method.trained_len.fill_(8)  # beyond 8 tokens the base grows with the length
    rows = []
    rotary_module = sys.modules[type(model.method).__module__]  # the module object the registry loaded
    real = rotary_module._rotated
    monkeypatch.setattr(rotary_module, "_rotated", lambda x, cos, sin, sign: rows.append(x.shape[-2]) or real(x, cos, sin, sign))
    idx = torch.randint(0, 256, (1, 14))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        parts = [model(idx[:, :10], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(10, 14)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=3e-4, atol=3e-4)
    assert rows[-2:] == [1, 14]  # the last step: its query, and every key so far


def test_prepare_runs_once_per_forward_and_every_layer_gets_its_state(monkeypatch):
    model = build_model(model_config("tiny", "t5_bias", n_layers=4))
    calls, seen = [], []
    real_prepare, real_attend = model.method.prepare, model.method.attend
    monkeypatch.setattr(model.method, "prepare", lambda *a: calls.append(a) or real_prepare(*a))
    monkeypatch.setattr(
        model.method,
        "attend",
        lambda q, k, v, qp, kp, layer, state: seen.append(state) or real_attend(q, k, v, qp, kp, layer, state),
    )
    model(torch.randint(0, 256, (2, 9)))
    assert len(calls) == 1 and len(seen) == 4 and all(s is seen[0] for s in seen)
    assert seen[0].shape == (4, 9, 9) and seen[0].requires_grad


def test_prepare_is_told_the_dtype_q_and_k_have_under_autocast(monkeypatch):
    model = build_model(model_config("tiny", "t5_bias", n_layers=1))
    pairs = []
    real_attend = model.method.attend
    monkeypatch.setattr(
        model.method,
        "attend",
        lambda q, k, v, qp, kp, layer, state: pairs.append((q.dtype, state.dtype)) or real_attend(q, k, v, qp, kp, layer, state),
    )
    idx = torch.randint(0, 256, (1, 6))
    model(idx)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(idx)
    assert pairs == [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)]


# --------------------------------------------------------------------------------------------------
# Hardening round 5 (issue 56): a windowed layer's KV cache never reserves more than the capacity
# asked for: ``model_overrides.window=100000000`` on a 64-token context holds 64 slots, not 2 x 10^8
# (an oom row asking for 102 GB), and decodes what the full cache decodes.


def test_a_window_longer_than_the_context_reserves_only_the_capacity():
    torch.manual_seed(0)
    k, v = torch.randn(2, 3, 60, 4), torch.randn(2, 3, 60, 4)
    huge, plain = KVCache(1, capacity=64, windows=[100_000_000]), KVCache(1, capacity=64)
    with torch.no_grad():
        for start in range(0, 60, 20):
            got = huge.append(0, k[:, :, start : start + 20], v[:, :, start : start + 20], start)
            want = plain.append(0, k[:, :, start : start + 20], v[:, :, start : start + 20], start)
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert huge._k[0].shape[2] == 64


def test_a_short_window_still_gets_twice_its_length():
    cache = KVCache(1, capacity=64, windows=[8])
    with torch.no_grad():
        cache.append(0, torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 4, 2), 0)
    assert cache._k[0].shape[2] == 16


# --------------------------------------------------------------------------------------------------
# Grouped-query attention in the shared model (``ModelConfig.n_kv_heads``; issue 40): query head h
# reads key/value head h // (H / Hkv), the KV cache holds Hkv heads, every method takes the layout
# (the conformance kit's ``gqa`` check), and a bad setting is one line.


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


# --------------------------------------------------------------------------------------------------
# Sliding-window attention in the shared model (``ModelConfig.window`` and ``window_layers``; issue 40):
# a query sees its last ``window`` keys, only the listed layers are windowed, a windowed layer's KV
# cache keeps only those keys and decoding with it equals the full forward, the methods that cannot
# take a window (cope, fox and ssmax can) say so in one line, and a bad setting is one line before
# anything runs.


def _windowed_model(method="alibi", **layout):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, n_layers=3, d_model=64, n_heads=4, d_ff=96, method=method, **layout)
    model = build_model(cfg).eval()
    with torch.no_grad():  # learned position parameters away from their start: a real contribution
        for p in model.method.parameters():
            p.normal_(0, 0.5)
    return model


def _idx(t, seed=0):
    return torch.randint(0, 50, (2, t), generator=torch.Generator().manual_seed(seed))


# --- settings ---------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "16"])
def test_a_bad_window_is_one_line_naming_what_is_allowed(value):
    with pytest.raises(ValueError) as err:
        ModelConfig(window=value)
    assert str(err.value) == (
        f"model config: window ({value!r}) must be a positive integer; allowed: an integer >= 1 "
        "(the keys a query sees, itself included) or null"
    )


@pytest.mark.parametrize("value", [[0, 4], [-1], [1, 1], 2, [True], "0,1"])
def test_window_layers_out_of_range_is_one_line_naming_what_is_allowed(value):
    with pytest.raises(ValueError) as err:
        ModelConfig(n_layers=4, window=8, window_layers=value)
    assert str(err.value) == (
        f"model config: window_layers ({value!r}) must list distinct layer indices; allowed: a "
        "list of integers in 0..3 (n_layers 4) or null (every layer)"
    )


def test_window_layers_without_a_window_is_one_line():
    with pytest.raises(
        ValueError,
        match=r"^model config: window_layers is set without a window; allowed: "
        r"window_layers with a window \(an integer >= 1\)$",
    ):
        ModelConfig(n_layers=4, window_layers=[0])


def test_window_layers_name_the_windowed_layers():
    # every layer but each 4th: Mistral-style hybrids of sliding and global layers
    cfg = ModelConfig(n_layers=8, window=16, window_layers=[0, 1, 2, 4, 5, 6])
    assert [cfg.layer_window(i) for i in range(8)] == [16, 16, 16, None, 16, 16, 16, None]
    assert [ModelConfig(n_layers=3, window=4).layer_window(i) for i in range(3)] == [4, 4, 4]
    assert [ModelConfig(n_layers=3).layer_window(i) for i in range(3)] == [None] * 3
    model = _windowed_model(window=4, window_layers=[1])
    assert [b.window for b in model.blocks] == [None, 4, None]


def test_a_suite_takes_a_window_from_the_command_line_and_refuses_bad_ones_before_running():
    from posbench.run.suite import SuiteError, load, parse_set, resolve

    suite = resolve(
        load("extrapolation"), "cpu", parse_set(["model_overrides.window=16", "model_overrides.window_layers=[0, 1, 2]"])
    )
    assert suite.settings.model_overrides == {"window": 16, "window_layers": [0, 1, 2]}
    bad = {
        "model_overrides.window=0": "model_overrides.window: window (0) must be a positive integer; allowed: an integer "
        ">= 1 (the keys a query sees, itself included) or null",
        "model_overrides.window=true": "model_overrides.window: window = True; allowed: an integer or null",
        "model_overrides.window_layers=[0, 4]": "model_overrides.window_layers: window_layers ([0, 4]) must list "
        "distinct layer indices; allowed: a list of integers in 0..3 (n_layers 4) "
        "or null (every layer)",
    }
    for item, line in bad.items():
        sets = parse_set(["model_overrides.window=16", item] if "layers" in item else [item])
        with pytest.raises(SuiteError) as err:
            resolve(load("extrapolation"), "cpu", sets)
        key = item.partition("=")[0]
        assert str(err.value) == f"--set {key}: {line}"


def test_model_overrides_are_checked_by_each_field_type():
    from posbench.run.suite import SuiteError, load, parse_set, resolve

    suite = resolve(load("extrapolation"), "cpu", parse_set(["model_overrides.dropout=0.3"]))
    assert suite.settings.model_overrides == {"dropout": 0.3}  # a float field takes a number
    for item, line in {
        "model_overrides.d_model=2.5": "d_model = 2.5; allowed: an integer",
        "model_overrides.window_layers=[a]": "window_layers = ['a']; allowed: a list of integers or null",
        "model_overrides.n_layers=null": "n_layers = None; allowed: an integer",
    }.items():
        with pytest.raises(SuiteError) as err:
            resolve(load("extrapolation"), "cpu", parse_set([item]))
        key = item.partition("=")[0]
        assert str(err.value) == f"--set {key}: {key}: {line}"


def test_an_unknown_composed_name_is_one_line():
    with pytest.raises(registry.RegistryError) as err:
        registry.get("alibi+bogus")
    assert str(err.value) == (
        "unknown method 'alibi+bogus': 'bogus' is not a modifier; allowed: METHOD+MODIFIER with a modifier from: gate, qknorm, sink, ssmax"
    )


@pytest.mark.parametrize("method", ["alibi_triton", "t5_triton"])
def test_the_triton_methods_decline_a_window_in_one_line(method):
    with pytest.raises(Unavailable) as err:
        registry.get(method)(ModelConfig(n_heads=4, window=16, method=method))
    assert str(err.value) == (
        f"{method}: sliding-window attention (window 16) is not supported: the fused kernel masks "
        f"by causality alone (posbench/triton_kernels/{method.removesuffix('_triton')}_attention.py)"
    )


def test_only_the_fused_kernel_methods_decline_a_window():
    declining = {n for n, cls in registry.discover().items() if cls.no_window}
    assert declining == {"alibi_triton", "t5_triton", "fox_triton"}


# --- the model --------------------------------------------------------------------------------


def test_a_row_records_the_window():
    assert _windowed_model(window=8, window_layers=[2, 0]).info("cpu", torch.float32)["window"] == "8 on layers [0, 2]"
    assert _windowed_model(window=8).info("cpu", torch.float32)["window"] == "8"
    assert "window" not in _windowed_model().info("cpu", torch.float32)


def test_a_window_no_shorter_than_the_sequence_is_plain_causal_attention_bit_for_bit():
    idx = _idx(17)
    with torch.no_grad():
        assert torch.equal(_windowed_model("rotary")(idx), _windowed_model("rotary", window=17)(idx))
        assert not torch.equal(_windowed_model("rotary")(idx), _windowed_model("rotary", window=16)(idx))


@pytest.mark.parametrize("method", ["nope", "rotary", "alibi", "t5_bias", "cope", "fox", "sandwich", "rotary+ssmax"])
def test_a_token_older_than_every_window_changes_nothing(method):
    # with 3 windowed layers a token reaches at most 3 x (window - 1) positions further
    model, idx = _windowed_model(method, window=5), _idx(30)
    changed = idx.clone()
    changed[:, 0] = (changed[:, 0] + 1) % 50
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, 13:], b[:, 13:], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(a[:, :13], b[:, :13])  # within reach it does


# methods whose attend without a state is their reference on the keys the model encoded
@pytest.mark.parametrize("method", ["nope", "alibi", "t5_bias", "cope", "fox", "alibi+ssmax"])
def test_the_windowed_model_equals_a_plain_masked_forward(method):
    # The reference: the same weights without a window, each windowed layer's attention taken
    # one query at a time against its last 6 keys only (the method's own attend, no mask of ours).
    model, idx = _windowed_model(method, window=6, window_layers=[0, 2]), _idx(23)
    plain = _windowed_model(method)
    plain.load_state_dict(model.state_dict())
    with torch.no_grad():
        got = model(idx)
        # the window changes the output only by the masked keys: beyond 6 tokens the models differ
        assert not torch.allclose(got, plain(idx))
        windows = [6, None, 6]
        seen = []
        real = plain.method.attend  # bound now: masked replaces it below

        def masked(q, k, v, q_pos, k_pos, layer, state=None):
            seen.append(layer)
            if windows[layer] is None:
                return real(q, k, v, q_pos, k_pos, layer, state)
            # one query at a time against its last `window` keys: the plain method's attention
            rows = [
                real(
                    q[:, :, i : i + 1],
                    k[:, :, max(0, i - 5) : i + 1],
                    v[:, :, max(0, i - 5) : i + 1],
                    q_pos[i : i + 1],
                    k_pos[max(0, i - 5) : i + 1],
                    layer,
                )
                for i in range(q.shape[2])
            ]
            return torch.cat(rows, 2)

        plain.method.attend = masked
        want = plain(idx)
    assert seen == [0, 1, 2]
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["alibi", "rotary", "t5_bias", "cope", "fox", "xpos", "alibi+ssmax", "randomized"])
@pytest.mark.parametrize("prefill", [3, 11])
def test_decoding_with_a_window_equals_the_full_forward_and_the_cache_keeps_the_window(method, prefill):
    model, idx = _windowed_model(method, window=7, window_layers=[0, 2]), _idx(29)
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        parts = [model(idx[:, :prefill], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(prefill, 29)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-4)
    assert [k.shape[2] for k, _ in cache.layers()] == [7, 29, 7]


def test_the_cache_of_a_windowed_layer_holds_exactly_the_last_window_keys():
    model, idx = _windowed_model("nope", window=4, window_layers=[1]), _idx(20)
    with torch.no_grad():
        whole = model.new_cache()
        model(idx, cache=whole)  # layer 0 keeps all 20: the reference keys
        cache = model.new_cache()
        model(idx[:, :6], cache=cache)
        for t in range(6, 20):
            model(idx[:, t : t + 1], cache=cache)
            (k0, v0), (k1, v1), (k2, v2) = cache.layers()
            assert k1.shape[2] == 4 and k0.shape[2] == t + 1
            # the global layer 0 of both caches agrees; layer 1 holds the tail of what it would hold unwindowed
            torch.testing.assert_close(k0, whole.layers()[0][0][:, :, : t + 1])
    ref = model.new_cache()
    ref.windows = [None] * 3
    with torch.no_grad():
        model(idx, cache=ref)
    torch.testing.assert_close(cache.layers()[1][0], ref.layers()[1][0][:, :, -4:])
    torch.testing.assert_close(cache.layers()[1][1], ref.layers()[1][1][:, :, -4:])
    hd = 16
    assert cache.nbytes() == 2 * 2 * 4 * hd * 4 * (20 + 4 + 20)  # (k, v) x B x H x hd x float32 x slots


def test_a_windowed_cache_moves_its_keys_in_its_buffer_and_keeps_them_in_order():
    cache = KVCache(n_layers=1, windows=[3])
    g = torch.Generator().manual_seed(0)
    keys = torch.randn(1, 2, 40, 4, generator=g)
    sizes = []
    k, _ = cache.append(0, keys[:, :, :5], keys[:, :, :5], 0)
    assert torch.equal(k, keys[:, :, :5])  # the chunk sees all its keys; then 3 are kept
    for t in range(5, 40):
        k, v = cache.append(0, keys[:, :, t : t + 1], keys[:, :, t : t + 1], t)
        assert torch.equal(k, keys[:, :, t - 3 : t + 1]) and torch.equal(v, k)
        sizes.append(cache._k[0].shape[2])
    assert max(sizes) == 6  # two windows of room, reused: never grown
    assert torch.equal(cache.layers()[0][0], keys[:, :, -3:])
    fork = cache.fork()
    k, _ = fork.append(0, keys[:, :, :1], keys[:, :, :1], 40)
    assert torch.equal(k[:, :, :3], keys[:, :, -3:]) and torch.equal(cache.layers()[0][0], keys[:, :, -3:])


def test_a_windowed_cache_under_autograd_concatenates_and_keeps_the_window():
    cache = KVCache(n_layers=1, windows=[2])
    k0, k1 = (torch.randn(1, 1, t, 4).requires_grad_() for t in (3, 1))
    a, _ = cache.append(0, k0, k0, 0)
    b, _ = cache.append(0, k1, k1, 3)
    assert a.shape[2] == 3 and b.shape[2] == 3  # the 2 kept and the new one
    b.sum().backward()
    assert torch.equal(k0.grad, torch.tensor([0.0, 1.0, 1.0])[None, None, :, None].expand(1, 1, 3, 4))


def test_ssmax_counts_only_the_keys_in_the_window():
    log_key_counts = sys.modules[registry.get("nope+ssmax").attend.__module__].log_key_counts  # methods/ssmax.py
    got = log_key_counts(4, 10, "cpu", window=8)  # queries at key indices 6..9 see 7, 8, 8, 8 keys
    assert torch.allclose(got, torch.tensor([7.0, 8.0, 8.0, 8.0]).log())
    assert torch.allclose(log_key_counts(3, 3, "cpu"), torch.tensor([1.0, 2.0, 3.0]).log())
    model = _windowed_model("nope+ssmax", window=4)
    q = torch.randn(1, 4, 6, 16)
    with torch.no_grad():
        scale = model.method.ssmax_s[0].float()[:, None] * torch.tensor([1.0, 2, 3, 4, 4, 4]).log()
        want = _windowed_model("nope", window=4).method.attend(
            q * scale[None, :, :, None], q, q, torch.arange(6), torch.arange(6), 0
        )
        got = model.method.attend(q, q, q, torch.arange(6), torch.arange(6), 0)
    torch.testing.assert_close(got, want)


def test_presets_have_the_papers_shapes():
    wt = model_config("wt103", "alibi")
    assert (wt.n_layers, wt.d_model, wt.n_heads, wt.d_ff) == (16, 1024, 8, 4096)
    cc = model_config("cc100-1.3b", "alibi")
    assert (cc.n_layers, cc.d_model, cc.n_heads, cc.d_ff) == (25, 2048, 16, 8192)
    tiny = build_model(model_config("tiny", "sinusoidal"))
    assert 0.5e6 < tiny.num_parameters() < 1.5e6
    assert tiny.tok.weight is not None and tiny.tok.weight.data_ptr() == tiny.tok.weight.data_ptr()


def test_model_ties_embeddings_and_rejects_bad_config():
    model = build_model(model_config("tiny", "nope", n_layers=1))
    idx = torch.randint(0, 256, (1, 4))
    logits = model(idx)
    x = model.ln_f(model.blocks[0](model.tok(idx) * 128**0.5, model.method, torch.arange(4), torch.arange(4), None, None))
    torch.testing.assert_close(logits, x @ model.tok.weight.T)
    with pytest.raises(ValueError, match="unknown model preset 'huge'; allowed: tiny, small"):
        model_config("huge")
    with pytest.raises(ValueError, match="unknown model option"):
        model_config("tiny", layers=3)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        model_config("tiny", n_heads=3)
    with pytest.raises(ValueError, match="pos must have shape"):
        model(idx, pos=torch.arange(5))


def test_methods_work_under_inference_mode():
    """Evaluation runs under torch.inference_mode, whose tensors keep no version counter."""
    for name in ("alibi", "rotary", "t5_bias"):
        model = build_model(model_config("tiny", name, n_layers=1))
        idx = torch.randint(0, 256, (1, 12))
        with torch.no_grad():
            expected = model(idx)
        with torch.inference_mode():
            torch.testing.assert_close(model(idx), expected)
            torch.testing.assert_close(model(idx, pos=torch.arange(12)), expected)


# --------------------------------------------------------------------------------------------------
# Under torch.compile, the mission's methods trace as one graph, as sinusoidal does: a graph break
# per layer (a cache keyed on storage pointers, an out= write into a view) would put Python between
# graphs into a method's compiled time, a cost of our code rather than of the method.


@pytest.mark.parametrize("method", ["sinusoidal", "rotary", "alibi", "t5_bias"])
def test_method_traces_without_graph_breaks_and_matches_eager(method):
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = build_model(model_config("tiny", method, n_layers=2)).eval()
    x = torch.randint(0, 256, (1, 37))
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    with torch.no_grad():
        eager = model(x)
        traced = torch.compile(model, backend="eager")(x)  # dynamo's graph, run without inductor
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()


# --------------------------------------------------------------------------------------------------
# Every method that runs on a CPU computes exactly what it computed when the reference was written:
# logits and the gradient of every parameter, float32 and bfloat16, for training at a length that
# attends by blocks (520 queries) and at one that attends with the masked bias (37), evaluation,
# KV-cache decoding (a prefill, then single tokens) and interpolated (float) positions.
#
# Where the machine matches the fingerprint stored with the reference (torch version, CPU model and
# flags, torch's CPU flash op with a mask), every (method, dtype, mode) must match its SHA-256 bit
# for bit; elsewhere its float64 sums and sampled entries must agree within a tight tolerance of
# each tensor's scale (``fallback_problems``). Subnormals are not flushed here (the reference was
# written so); flushing them changes none of these bits on the reference's CPU.
#
# Regenerate the reference only at a commit where behaviour is meant to change (and say so there):
#     PYTHONPATH=. python tests/core/test_model.py

REFERENCE = Path(__file__).with_name("bit_identity.json")
LONG, SHORT = 520, 37  # >= 512 queries: the blocked CPU plans; fewer: the masked bias
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
RTOL = {"float32": 1e-5, "bfloat16": 2e-2}  # the summaries' tolerance on another machine
# A method parameter's gradient, judged against the scale of the method's gradients: a sum over
# B x H x L x L scores that cancels, to nothing at all for FIRE's b2 (a per-head constant shifts no
# softmax), keeps few digits of its own. On an AMD EPYC that reproduces every reference bit, run
# with torch's AVX2 or scalar kernels instead of AVX-512 (ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA,
# MKL_ENABLE_INSTRUCTIONS), the largest change was 8e-5 (AVX2) and 7e-4 (scalar) of that scale in
# float32 (FOX's gate bias), 3e-4 and 5e-3 in bfloat16 (FIRE's c and b2); FIRE's b1 gradient 10%
# off moves its sum of magnitudes by 5x this tolerance (the planted changes below).
PARAM_RTOL = {"float32": 2e-3, "bfloat16": 2e-2}
SAMPLES = 8  # entries of the logits and of the gradients kept per (method, dtype, mode)


def fingerprint() -> dict:
    """What must be equal for bit-identical floats: torch, the CPU and its flash op with a mask."""
    cpu = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "flags") and key.strip() not in cpu:
                cpu[key.strip()] = value.strip()
    try:
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        flash = "attn_mask" in str(op.default._schema)
    except (AttributeError, RuntimeError):
        flash = False
    return {
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu": cpu.get("model name", platform.processor()),
        "flags": hashlib.sha256(cpu.get("flags", "").encode()).hexdigest()[:16],
        "capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_flash_with_mask": flash,
    }


def methods() -> list[str]:
    """Every registered method but the fused Triton ones (CUDA kernels), and the two plugins."""
    names = [n for n in registry.names() if not issubclass(registry.get(n), FusedKernelMethod)]
    return names + list(PLUGINS)


def build(name: str) -> TransformerLM:
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=4, d_ff=64, method=name))
    with torch.no_grad():  # position parameters large enough that a dropped bias would show
        for p in model.method.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    return model


def tokens(b: int, t: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 64, (b, t), generator=torch.Generator().manual_seed(seed))


def train(model, dtype, length: int, batch: int, pos=None) -> dict[str, torch.Tensor]:
    model.train()
    idx = tokens(batch, length + 1, length)
    torch.manual_seed(1)  # a method that draws positions in training (randomized)
    with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        logits = model(idx[:, :-1], pos)
        loss = lm_loss(logits, idx[:, 1:])
    loss.backward()
    out = {"logits": logits.detach()}
    out.update({f"grad/{n}": p.grad for n, p in sorted(model.named_parameters()) if p.grad is not None})
    return out


def evaluate(model, dtype, length: int, pos=None) -> dict[str, torch.Tensor]:
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
        return {"logits": model(tokens(2, length, length + 7), pos)}


def decode(model, dtype, prefill: int, steps: int = 3) -> dict[str, torch.Tensor]:
    """A prefill of ``prefill`` tokens, then ``steps`` single tokens, in ``dtype`` weights (serving)."""
    model.eval().to(dtype)
    idx = tokens(1, prefill + steps, prefill + 11)
    cache = model.new_cache()
    with torch.no_grad():
        out = [model(idx[:, :prefill], cache=cache)]
        out += [model(idx[:, t : t + 1], cache=cache) for t in range(prefill, prefill + steps)]
    return {"logits": torch.cat(out, 1)}


MODES = {
    "train_long": lambda m, d: train(m, d, LONG, 2),
    "train_short": lambda m, d: train(m, d, SHORT, 2),
    "eval_long": lambda m, d: evaluate(m, d, LONG),
    "eval_short": lambda m, d: evaluate(m, d, SHORT),
    "decode_long": lambda m, d: decode(m, d, LONG),
    "decode_short": lambda m, d: decode(m, d, SHORT),
    "interp_train": lambda m, d: train(m, d, LONG, 1, torch.arange(LONG) * 0.5),
    "interp_eval": lambda m, d: evaluate(m, d, SHORT, torch.arange(SHORT) * 0.25),
}


def _flat(t: torch.Tensor) -> torch.Tensor:
    return t.detach().double().reshape(-1)


def record(out: dict[str, torch.Tensor]) -> dict:
    """The SHA-256 of every tensor's bytes (names, shapes, dtypes included) and robust summaries:
    per tensor its float64 sum and sum of magnitudes, and entries sampled from the logits and from
    all gradients end to end."""
    h = hashlib.sha256()
    for name in sorted(out):
        t = out[name].detach().contiguous().cpu()
        h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.dtype == torch.bfloat16 else t.numpy().tobytes())
    grads = [n for n in sorted(out) if n.startswith("grad/")]
    # Summed: the logits, all gradients end to end, and each of the method's own parameters.
    parts = {"logits": _flat(out["logits"])}
    if grads:
        parts["grads"] = torch.cat([_flat(out[n]) for n in grads])
    parts.update({n: _flat(out[n]) for n in grads if n.startswith("grad/method.")})
    sums = {k: [float(f.sum()), float(f.abs().sum()), f.numel()] for k, f in parts.items()}
    samples = {}
    for key in ("logits", "grads")[: len(parts)]:
        at = torch.linspace(0, parts[key].numel() - 1, SAMPLES).long()
        samples[key] = [float(x) for x in parts[key][at]]
    return {"sha256": h.hexdigest(), "sums": sums, "samples": samples}


def measure(name: str, dtype: str, mode: str) -> dict:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one summation order
    torch.set_flush_denormal(False)  # as the reference was written (tests/conftest.py restores it)
    try:
        return record(MODES[mode](build(name), DTYPES[dtype]))
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def plugins_registered():
    added = [registry.register(cls) for cls in PLUGINS.values() if cls.name not in registry.names()]
    try:
        yield
    finally:
        for cls in added:
            registry.unregister(cls.name)


def _reference() -> dict:
    return json.loads(REFERENCE.read_text())


CASES = [(n, d, m) for n in methods() for d in DTYPES for m in MODES] if REFERENCE.is_file() else []


def _close(got: float, want: float, scale: float, rtol: float) -> bool:
    return abs(got - want) <= rtol * (abs(want) + scale) + 1e-30


def fallback_problems(got: dict, want: dict, dtype: str) -> list:
    """What differs beyond rounding between two ``record``s of one case on different machines
    (empty: the same numbers). The logits and all gradients end to end: each sum against the sum
    of magnitudes, each sampled entry against the mean magnitude. A method parameter's gradient:
    its sum and sum of magnitudes against ``PARAM_RTOL`` of its size times the largest mean
    magnitude among the method's parameters' gradients (its own may be rounding noise)."""
    rtol, problems = RTOL[dtype], []
    if set(got["sums"]) != set(want["sums"]):
        return [("tensors", sorted(got["sums"]), sorted(want["sums"]))]
    params = {k: v for k, v in want["sums"].items() if k.startswith("grad/method.")}
    group = max((a / n for _s, a, n in params.values()), default=0.0)  # mean |element| of the largest
    for key, (s, a, n) in want["sums"].items():
        gs, ga, gn = got["sums"][key]
        if key in params:
            tol = PARAM_RTOL[dtype] * n * group
            ok = abs(gs - s) <= tol and abs(ga - a) <= tol
        else:
            ok = _close(gs, s, a, rtol) and _close(ga, a, 0.0, rtol)
        if gn != n or not ok:
            problems.append((key, got["sums"][key], want["sums"][key]))
    for key, values in want["samples"].items():
        _, total, n = want["sums"][key]
        scale = total / n  # the mean magnitude
        if not all(_close(g, w, scale, 10 * rtol) for g, w in zip(got["samples"][key], values)):
            problems.append((key, got["samples"][key], values))
    return problems


def test_the_reference_covers_every_cpu_method():
    with plugins_registered():
        want = {f"{n}/{d}/{m}" for n in methods() for d in DTYPES for m in MODES}
    assert set(_reference()["cases"]) == want


@pytest.mark.parametrize("name, dtype, mode", CASES)
def test_outputs_and_gradients_are_bit_identical(name, dtype, mode):
    ref = _reference()
    want = ref["cases"][f"{name}/{dtype}/{mode}"]
    with plugins_registered():
        got = measure(name, dtype, mode)
    if ref["fingerprint"] == fingerprint():
        assert got["sha256"] == want["sha256"], f"{name} {dtype} {mode}: the bytes changed"
        return
    # Another machine or torch: the same numbers up to rounding.
    assert not fallback_problems(got, want, dtype), f"{name} {dtype} {mode}"


def _slopes_off_by_3_percent(monkeypatch):
    alibi = sys.modules[registry.get("alibi").__module__]
    real = alibi.slopes_tensor
    monkeypatch.setattr(alibi, "slopes_tensor", lambda n_heads: real(n_heads) * 1.03)


def _rows_not_reversed(monkeypatch):
    """The blocked plans' tiles assume each block's rows reversed: a plan that forgot it."""
    monkeypatch.setattr(blocked, "block_reversal", lambda tq, rows, device: torch.arange(tq, device=device))


def _b1_gradient_off_by_a_tenth(monkeypatch):
    """A backward that loses a tenth of one parameter's gradient (FIRE's b1 of 6 parameters)."""

    real = build

    def build_hooked(name):
        model = real(name)
        model.method.b1.register_hook(lambda g: g * 0.9)
        return model

    monkeypatch.setattr(sys.modules[__name__], "build", build_hooked)


PLANTED = {
    "alibi slopes 3% off": (_slopes_off_by_3_percent, "alibi", "float32", "train_long"),
    "blocked rows not reversed": (_rows_not_reversed, "t5_bias", "bfloat16", "train_long"),
    "fire's b1 gradient 10% off": (_b1_gradient_off_by_a_tenth, "fire", "float32", "train_long"),
}


@pytest.mark.parametrize("plant", PLANTED)
def test_the_fallback_still_catches_a_change_that_moves_values(plant, monkeypatch):
    """The tolerance that lets another CPU pass is no blindfold: on this one, compared as another
    CPU is, the case passes unchanged and fails with a planted change. (A block size alone only
    reorders sums: 1e-10 of the gradients' scale, below what CPUs differ by; the SHA-256 catches it.)"""
    apply, name, dtype, mode = PLANTED[plant]
    want = _reference()["cases"][f"{name}/{dtype}/{mode}"]
    assert not fallback_problems(measure(name, dtype, mode), want, dtype)
    apply(monkeypatch)
    assert fallback_problems(measure(name, dtype, mode), want, dtype)


def write_reference() -> None:
    with plugins_registered():
        cases = {f"{n}/{d}/{m}": measure(n, d, m) for n in methods() for d in DTYPES for m in MODES}
    lines = ",\n".join(f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(cases.items()))
    REFERENCE.write_text(f'{{"fingerprint": {json.dumps(fingerprint(), sort_keys=True)},\n"cases": {{\n{lines}\n}}}}\n')
    print(f"wrote {REFERENCE} ({len(cases)} cases)")


if __name__ == "__main__":
    write_reference()

"""Sliding-window attention in the shared model (``ModelConfig.window`` and ``window_layers``; issue 40):
a query sees its last ``window`` keys, only the listed layers are windowed, a windowed layer's KV
cache keeps only those keys and decoding with it equals the full forward, the methods that cannot
take a window (cope, fox and ssmax can) say so in one line, and a bad setting is one line before
anything runs."""

from __future__ import annotations

import sys

import pytest
import torch

from posbench.core import registry
from posbench.core.config import ModelConfig
from posbench.core.model import KVCache, build_model
from posbench.core.outcome import Unavailable


def _model(method="alibi", **layout):
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
    model = _model(window=4, window_layers=[1])
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
    assert _model(window=8, window_layers=[2, 0]).info("cpu", torch.float32)["window"] == "8 on layers [0, 2]"
    assert _model(window=8).info("cpu", torch.float32)["window"] == "8"
    assert "window" not in _model().info("cpu", torch.float32)


def test_a_window_no_shorter_than_the_sequence_is_plain_causal_attention_bit_for_bit():
    idx = _idx(17)
    with torch.no_grad():
        assert torch.equal(_model("rotary")(idx), _model("rotary", window=17)(idx))
        assert not torch.equal(_model("rotary")(idx), _model("rotary", window=16)(idx))


@pytest.mark.parametrize("method", ["nope", "rotary", "alibi", "t5_bias", "cope", "fox", "sandwich", "rotary+ssmax"])
def test_a_token_older_than_every_window_changes_nothing(method):
    # with 3 windowed layers a token reaches at most 3 x (window - 1) positions further
    model, idx = _model(method, window=5), _idx(30)
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
    model, idx = _model(method, window=6, window_layers=[0, 2]), _idx(23)
    plain = _model(method)
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
    model, idx = _model(method, window=7, window_layers=[0, 2]), _idx(29)
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        parts = [model(idx[:, :prefill], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(prefill, 29)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-4, atol=1e-4)
    assert [k.shape[2] for k, _ in cache.layers()] == [7, 29, 7]


def test_the_cache_of_a_windowed_layer_holds_exactly_the_last_window_keys():
    model, idx = _model("nope", window=4, window_layers=[1]), _idx(20)
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
    model = _model("nope+ssmax", window=4)
    q = torch.randn(1, 4, 6, 16)
    with torch.no_grad():
        scale = model.method.ssmax_s[0].float()[:, None] * torch.tensor([1.0, 2, 3, 4, 4, 4]).log()
        want = _model("nope", window=4).method.attend(q * scale[None, :, :, None], q, q, torch.arange(6), torch.arange(6), 0)
        got = model.method.attend(q, q, q, torch.arange(6), torch.arange(6), 0)
    torch.testing.assert_close(got, want)

"""The KV cache and the per-forward method pipeline (prepare, encode_qk, attend) that fills it."""

import sys

import pytest
import torch

from posbench.core.model import KVCache, build_model, model_config


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

"""``BiasMethod``: a method that writes only ``bias`` gets the shared path (prepare once per
forward, causal masking, the cached bias, attend with or without a state) and passes the
conformance kit with no code of its own; the four built-in bias methods use that path."""

import math

import pytest
import torch
from torch import nn

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import ModelConfig, causal_mask
from posbench.core.model import build_model


class TinyLearned(BiasMethod):
    """-slope_h * |i - j| with a learned slope per head: the whole plugin is ``bias``."""

    name = "tiny_learned_bias"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.slope = nn.Parameter(torch.full((cfg.n_heads,), 0.1))  # (H,)

    def bias(self, q_pos, k_pos, dtype):
        dist = (q_pos.float()[:, None] - k_pos.float()[None, :]).abs()  # (Tq, Tk)
        # (H, Tq, Tk), kept float32: distances near 16384 rounded to bfloat16 fail far_positions
        return -self.slope.float()[:, None, None] * dist


class TinyFixed(BiasMethod):
    """A fixed bias shared by the heads, (1, Tq, Tk), cached across forwards by its key."""

    name = "tiny_fixed_bias"

    def bias(self, q_pos, k_pos, dtype):
        dist = q_pos.float()[:, None] - k_pos.float()[None, :]
        return -torch.log1p(dist.clamp(min=0))[None]  # (1, Tq, Tk) float32 whatever the dtype

    def bias_form(self, dtype):
        return BiasForm(cache_key=())  # nothing but the positions


@pytest.mark.parametrize("cls", [TinyLearned, TinyFixed], ids=lambda c: c.name)
def test_a_plugin_that_writes_only_bias_passes_the_conformance_kit(plugin, cls):
    name = plugin(cls)
    results = testing.run_all(name)
    assert set(results) == {f"{c}/{d}" for c in testing.CHECKS for d in ("float32", "bfloat16")}
    assert {key: outcome for key, outcome in results.items() if outcome is not None} == {}


def reference(q, k, v, bias):
    """float64 softmax(q k^T / sqrt(hd) + bias, causal) v."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias.double()
    scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], "cpu"), float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.parametrize("tq, tk", [(9, 9), (4, 13), (1, 7)])
def test_attend_is_softmax_of_scores_plus_bias_under_the_causal_mask(tq, tk):
    m = TinyLearned(ModelConfig(d_model=64, n_heads=4))
    g = torch.Generator().manual_seed(tk)
    q = torch.randn(2, 4, tq, 16, generator=g)
    k, v = (torch.randn(2, 4, tk, 16, generator=g) for _ in range(2))
    pos = torch.arange(tk)
    dist = (pos[-tq:, None] - pos[None, :]).abs().double()
    want = reference(q, k, v, -0.1 * dist)
    with torch.no_grad():
        raw = m.attend(q, k, v, pos[-tq:], pos, 0)  # state None: the reference path
        prepared = m.attend(q, k, v, pos[-tq:], pos, 0, m.prepare(pos[-tq:], pos, q.dtype))
    torch.testing.assert_close(raw.double(), want, rtol=1e-5, atol=1e-5)
    assert torch.equal(raw, prepared)


def test_prepare_builds_the_bias_once_per_forward_and_masks_the_future():
    model = build_model(ModelConfig(d_model=64, n_heads=4, n_layers=3, method="alibi"))
    m = model.method
    calls = []
    real = m.bias
    m.bias = lambda *a: calls.append(a) or real(*a)
    idx = torch.randint(0, 256, (2, 10))
    model(idx)
    assert len(calls) == 1
    model(idx)  # alibi's bias depends on the positions only (its form's cache_key): cached across forwards
    assert len(calls) == 1
    pos = torch.arange(5)
    masked = m.prepare(pos, pos, torch.float32)
    assert masked.shape == (1, 4, 5, 5) and torch.isinf(masked[0, :, 1, 2:]).all() and not torch.isinf(masked[0, :, 1, :2]).any()


def test_a_learned_bias_is_built_every_forward_and_a_fixed_one_is_cached():
    cfg = ModelConfig(d_model=64, n_heads=4)
    learned, fixed = TinyLearned(cfg), TinyFixed(cfg)
    pos = torch.arange(6)
    assert learned.prepare(pos, pos, torch.float32) is not learned.prepare(pos, pos, torch.float32)
    first = fixed.prepare(pos, pos, torch.float32)
    assert fixed.prepare(pos, pos, torch.float32) is first
    assert first.shape == (1, 6, 6)  # broadcast over the heads by attention
    # A decode step (one query) drops what earlier steps cached: its keys are new every step.
    fixed.prepare(pos[-1:], pos, torch.float32)
    assert fixed.prepare(pos, pos, torch.float32) is not first


def test_a_bias_already_masked_is_not_masked_again():
    class Premasked(TinyLearned):
        def bias_form(self, dtype):
            return BiasForm(masked=True)

        def bias(self, q_pos, k_pos, dtype):
            return torch.zeros(1, q_pos.shape[0], k_pos.shape[0])

    pos = torch.arange(4)
    assert torch.equal(Premasked(ModelConfig()).prepare(pos, pos, torch.float32), torch.zeros(1, 4, 4))


def test_a_bias_method_without_bias_says_so_in_one_line():
    class Empty(BiasMethod):
        name = "empty_bias"

    with pytest.raises(NotImplementedError, match=r"^Empty \(method 'empty_bias'\) must implement bias\(q_pos, k_pos, dtype\)$"):
        Empty(ModelConfig()).prepare(torch.arange(3), torch.arange(3), torch.float32)


@pytest.mark.parametrize("name", ["alibi", "t5_bias", "kerple_log", "fire"])
def test_the_builtin_bias_methods_use_the_shared_path(name):
    cls = registry.get(name)
    assert issubclass(cls, BiasMethod)
    assert not {"prepare", "attend", "attend_bias"} & set(vars(cls)), f"{name} writes its own attention path"


def test_attn_backend_says_which_path_the_bias_takes(monkeypatch):
    from posbench.attention import flex

    # a GPU whose torch lacks FlexAttention: the masked bias (tests/attention/test_flex.py
    # has the names a GPU with it gives)
    monkeypatch.setattr(flex, "flex_available", lambda device: False)
    cfg = ModelConfig(d_model=64, n_heads=4)
    assert (
        TinyLearned(cfg).attn_backend("cpu", torch.float32)
        == "blocked float32 (flash op per block), one (H, L, L) bias per forward"
    )
    assert TinyLearned(cfg).attn_backend("cuda", torch.bfloat16) == "sdpa + bfloat16 bias (learned)"
    assert TinyFixed(cfg).attn_backend("cuda", torch.float32) == "sdpa + float32 bias"
    t5 = registry.build(ModelConfig(method="t5_bias"))
    assert t5.attn_backend("cpu", torch.float32) == "blocked float32 (flash op per block), distance row (no L x L)"
    assert t5.attn_backend("cuda", torch.bfloat16) == "sdpa + bfloat16 bias (learned)"
    alibi = registry.build(ModelConfig(method="alibi"))
    assert alibi.attn_backend("cpu", torch.float32) == "sdpa flash causal + per-key slope mask (linear bias, no L x L)"
    assert alibi.attn_backend("cpu", torch.bfloat16) == "blocked float32 (flash op per block), distance row (no L x L)"


def test_attn_backend_names_the_plain_paths_when_torch_lacks_the_masked_cpu_flash_op(monkeypatch):
    from posbench.attention import cpu_flash

    monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", None)
    alibi = registry.build(ModelConfig(method="alibi"))
    assert alibi.attn_backend("cpu", torch.float32) == "sdpa causal + slope column (linear bias, no L x L)"
    t5 = registry.build(ModelConfig(method="t5_bias"))
    assert t5.attn_backend("cpu", torch.float32) == "blocked float32, distance row (no L x L)"


def test_the_old_plugin_paths_are_gone():
    # The plugin API lives at its package paths only (docs/adding-a-method.md): BiasMethod in
    # posbench.attention.bias, the interface and registry in posbench.core; no alias of an old path.
    import importlib

    for old in (
        "posbench.core.bias",
        "posbench.method",
        "posbench.registry",
        "posbench.config",
        "posbench.model",
        "posbench.alibi",
        "posbench.testing",
    ):
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module(old)

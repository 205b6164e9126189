"""``BiasMethod``: a method that writes only ``bias`` gets the shared path (prepare once per
forward, causal masking, the cached bias, attend with or without a state) and passes the
conformance kit with no code of its own; the four built-in bias methods use that path."""

import math

import pytest
import torch
from torch import nn

from posbench.attention import routes
from posbench.attention.bias import BiasForm, BiasMethod
from posbench.attention.routes import Route
from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.config import model_config
from posbench.core.method import ModelConfig, causal_mask
from posbench.core.model import build_model, lm_loss
from tests.helpers.bias_plugins import PLUGINS, Wave, WaveTiles


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
    assert alibi.attn_backend("cpu", torch.float32) == (
        "sdpa flash causal + per-key slope mask (linear bias, no L x L; backward by 64-query blocks where SDPA's "
        "covers >= 75% of the square, L >= 512)"
    )
    assert alibi.attn_backend("cpu", torch.bfloat16) == "blocked float32 (flash op per block), distance row (no L x L)"


def test_attn_backend_names_the_plain_paths_when_torch_lacks_the_masked_cpu_flash_op(monkeypatch):
    from posbench.core import cpu_flash

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


# --------------------------------------------------------------------------------------------------
# ``BiasMethod``'s plans for attending without the L x L square (linear, distance, tiles): every
# bias method, built in or a plugin that writes only ``bias``, gets one with no code of its own, and
# attending with it equals the plain path (the masked bias, state None) in outputs and in the
# gradients of q, k, v and of the method's parameters (T5's table, KERPLE's r1 and r2, FIRE's MLP, c and
# L; FIRE's piecewise plan has tests of its own in tests/attention/test_piecewise.py).

BUILTIN = ["alibi", "t5_bias", "kerple_log", "fire"]


@pytest.fixture
def blocked(monkeypatch):
    """Blocks at every length, of 8 rows: short inputs run the blocked plans over several blocks."""
    monkeypatch.setattr(routes, "BLOCKED_MIN_ROWS", 2)
    monkeypatch.setattr(routes, "BLOCK_ROWS", 8)


def build(name, seed=0, **options):
    torch.manual_seed(seed)
    if name in PLUGINS:
        m = PLUGINS[name](ModelConfig(d_model=96, n_heads=3))
    else:
        m = registry.build(ModelConfig(method=name, d_model=96, n_heads=3, method_options=options))
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0, 0.5)  # large enough that a dropped bias would show
    return m


def qkv(seed, tq, tk, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, tq, 32, generator=g)
    k, v = (torch.randn(2, 3, tk, 32, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_() for x in (q, k, v)]


@pytest.mark.parametrize(
    "name, kind",
    [
        ("alibi", "linear"),
        ("t5_bias", "distance"),
        ("kerple_log", "distance"),
        ("fire", "piecewise"),
        ("wave_bias", "dense"),
        ("wave_tiles_bias", "tiles"),
    ],
)
def test_each_bias_method_gets_its_plan(blocked, name, kind):
    m = build(name)
    pos = torch.arange(20)
    plan = m.prepare(pos, pos, torch.float32)
    assert isinstance(plan, Route) and plan.kind == kind
    assert m.prepare(pos[-1:], pos, torch.float32).shape[-2:] == (1, 20)  # a decode step: the bias row
    assert m.prepare(pos * 0.5, pos * 0.5, torch.float32).kind in {"linear", "dense", "tiles"}  # float positions
    if name == "alibi":  # half precision would round the per-key slope mask: the distance plan instead
        assert m.prepare(pos, pos, torch.bfloat16).kind == "distance"
        assert m.prepare(pos[-5:], pos, torch.float32).kind == "distance"  # Tq < Tk
        assert build(name, bias_dtype="compute").prepare(pos, pos, torch.float32).kind == "distance"


@pytest.mark.parametrize("name", BUILTIN + list(PLUGINS))
@pytest.mark.parametrize("seed, tq, tk, scale", [(0, 33, 33, 1), (1, 7, 20, 1), (2, 17, 17, 0.37), (3, 1, 9, 1)])
def test_the_plan_equals_the_plain_path_with_every_gradient(blocked, name, seed, tq, tk, scale):
    m = build(name, seed)
    k_pos = torch.arange(tk) if scale == 1 else torch.arange(tk) * scale  # float: interpolated positions
    q_pos = k_pos[-tq:]
    q, k, v = qkv(seed, tq, tk, torch.float32)
    params = [p for p in m.parameters() if p.requires_grad]
    grad_out = torch.randn(2, 3, tq, 32, generator=torch.Generator().manual_seed(seed))
    # The plain path, in float64 (the method's own bias, masked, and explicit attention).
    ref = build(name, seed).double()
    want = ref.attend(q.double(), k.double(), v.double(), q_pos, k_pos, 0)
    wants = torch.autograd.grad(want, [q, k, v] + [p for p in ref.parameters() if p.requires_grad], grad_out.double())
    got = m.attend(q, k, v, q_pos, k_pos, 0, m.prepare(q_pos, k_pos, torch.float32))
    gots = torch.autograd.grad(got, [q, k, v] + params, grad_out)
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=2e-5)
    for g, w in zip(gots, wants):
        torch.testing.assert_close(g.double(), w.double(), rtol=1e-4, atol=5e-5)


@pytest.mark.parametrize("name", BUILTIN + list(PLUGINS))
def test_the_plan_in_bfloat16_keeps_the_bias_float32(blocked, name):
    m = build(name, 4)
    pos = torch.arange(30)
    q, k, v = qkv(4, 30, 30, torch.bfloat16)
    with torch.no_grad():
        want = build(name, 4).double().attend(q.double(), k.double(), v.double(), pos, pos, 0)
        got = m.attend(q, k, v, pos, pos, 0, m.prepare(pos, pos, torch.bfloat16))
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.double(), want, rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("name", BUILTIN)
def test_every_bias_method_passes_the_conformance_kit_on_the_blocked_path(blocked, name):
    results = testing.run_all(name)
    assert {key: outcome for key, outcome in results.items() if outcome is not None} == {}


@pytest.mark.parametrize("cls", [Wave, WaveTiles], ids=lambda c: c.name)
def test_a_plugin_with_only_bias_passes_the_conformance_kit_on_the_blocked_path(blocked, plugin, cls):
    results = testing.run_all(plugin(cls))
    assert {key: outcome for key, outcome in results.items() if outcome is not None} == {}


@pytest.mark.parametrize("name", ["alibi", "t5_bias", "kerple_log", "fire"])
def test_a_training_step_saves_no_square_of_scores(name):
    """Autograd keeps nothing of shape (..., L, L) for backward (the plain path saved every layer's
    B x H x L x L probabilities, and T5's bias, its gradient and layout were squares too); the
    default thresholds, L 520 (9 blocks of 64). FIRE's piecewise plan keeps no bias square either."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(vocab_size=32, n_layers=2, d_model=64, n_heads=2, d_ff=64, method=name))
    length = 520
    idx = torch.randint(0, 32, (1, length + 1))
    shapes = []

    def pack(t):
        shapes.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = lm_loss(model(idx[:, :-1]), idx[:, 1:])
    loss.backward()
    assert shapes and not [s for s in shapes if len(s) >= 2 and s[-1] >= length and s[-2] >= length]


@pytest.mark.parametrize("name", BUILTIN + list(PLUGINS))
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_the_plan_a_long_training_forward_takes_is_the_one_its_row_names(name, dtype):
    """``attn_backend`` is the name of the plan ``prepare`` builds at integer positions 0..L-1
    from ``BLOCKED_MIN_ROWS`` queries on: one choice, not a second decision tree of strings."""
    m = build(name)
    pos = torch.arange(routes.BLOCKED_MIN_ROWS + 8)
    plan = m.prepare(pos, pos, dtype)
    assert isinstance(plan, Route) and plan.name == m.attn_backend("cpu", dtype)


# --------------------------------------------------------------------------------------------------
# Issue 56 friction: a plugin whose ``bias()`` returns the wrong shape is told what came back and
# what was expected, not torch's size error in every layer; shapes that broadcast still pass.


class Shaped(BiasMethod):
    name = "shaped"
    shape = (3, 5)

    def bias(self, q_pos, k_pos, dtype):
        return torch.zeros(self.shape)


@pytest.mark.parametrize("shape", [(3, 5), (2, 7, 7), (4, 7, 6), (2, 4, 7, 7)])
def test_a_wrong_bias_shape_is_one_line_naming_both(shape):
    method = Shaped(model_config("tiny", "alibi"))
    method.shape = shape
    with pytest.raises(ValueError) as info:
        method.masked_bias(torch.arange(7), torch.arange(7), torch.float32)
    heads = method.cfg.n_heads
    assert str(info.value) == (
        f"method 'shaped': bias() returned {shape} where (H, Tq, Tk) = ({heads}, 7, 7) was expected "
        "(or a shape that broadcasts to it)"
    )


@pytest.mark.parametrize("shape", [(1, 7, 7), (7, 7), (None, 1, 7), (1, None, 7, 7)])
def test_shapes_that_broadcast_pass(shape):
    method = Shaped(model_config("tiny", "alibi"))
    method.shape = tuple(method.cfg.n_heads if n is None else n for n in shape)
    assert method.masked_bias(torch.arange(7), torch.arange(7), torch.float32).shape[-2:] == (7, 7)

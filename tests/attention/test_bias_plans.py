"""``BiasMethod``'s plans for attending without the L x L square (linear, distance, tiles): every
bias method, built in or a plugin that writes only ``bias``, gets one with no code of its own, and
attending with it equals the plain path (the masked bias, state None) in outputs and in the
gradients of q, k, v and of the method's parameters (T5's table, KERPLE's r1 and r2, FIRE's MLP, c and
L; FIRE's piecewise plan has tests of its own in tests/attention/test_piecewise.py)."""

import pytest
import torch

from posbench.attention import routes
from posbench.attention.routes import Route
from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import build_model, lm_loss
from tests.helpers.bias_plugins import PLUGINS, Wave, WaveTiles

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

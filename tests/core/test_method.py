"""Hooks may leave out ``state``: the model adapts such a hook once, when it is built, and a
signature the model cannot call is one line, reported once by the conformance kit."""

import copy

import pytest
import torch

from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import ModelConfig, PositionMethod, adapt_hooks, causal_attention, interface_problem
from posbench.core.model import build_model


class Natural(PositionMethod):
    """Every hook written the natural way, without ``state``: a learned per-position offset
    (embed), keys scaled (encode_qk, so a raw attend must scale them too) and a distance bias."""

    name = "natural_hooks"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.gain = torch.nn.Parameter(torch.ones(cfg.n_heads))  # (H,)

    def embed(self, x, pos):
        ramp = torch.linspace(-1, 1, x.shape[-1], dtype=torch.float32, device=x.device)
        return x + (torch.sin(pos.float()[:, None] * 0.1) * ramp).to(x.dtype)[None]

    def encode_qk(self, q, k, layer):
        return q, k * 2.0

    def attend(self, q, k, v, q_pos, k_pos, layer):
        dist = (q_pos.float()[:, None] - k_pos.float()[None, :]).clamp(min=0)
        # the layer's sliding window honoured, as the kit's window checks require (issue 40)
        return causal_attention(q, k, v, bias=-self.gain.float()[:, None, None] * dist * 0.1, window=self.window(layer))


class StateRequired(Natural):
    """encode_qk and attend require ``state`` (no default); the kit calls attend without one."""

    name = "state_required_hooks"

    def encode_qk(self, q, k, layer, state):
        return q, k

    def attend(self, q, k, v, q_pos, k_pos, layer, state):
        assert state is None  # this method prepares nothing
        return Natural.attend(self, q, k, v, q_pos, k_pos, layer)


class ScaledRaw(Natural):
    """embed and encode_qk without state (Natural's); attend takes it, to scale raw keys itself
    (state None: outside a model) as encode_qk scales them in one."""

    name = "scaled_raw_hooks"

    def prepare(self, q_pos, k_pos, dtype):
        return "keys encoded"

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return Natural.attend(self, q, k * 2.0 if state is None else k, v, q_pos, k_pos, layer)


class Unworkable(PositionMethod):
    name = "unworkable_hooks"

    def embed(self, x):
        return x


def test_hooks_without_state_work_in_the_model_and_outside_it(plugin):
    name = plugin(Natural)
    model = build_model(ModelConfig(d_model=64, n_heads=4, n_layers=2, method=name))
    idx = torch.randint(0, 256, (2, 12))
    with torch.no_grad():
        full = model(idx)
        cache = model.new_cache()
        parts = [model(idx[:, :5], cache=cache)] + [model(idx[:, t : t + 1], cache=cache) for t in range(5, 12)]
    torch.testing.assert_close(torch.cat(parts, 1), full, rtol=1e-5, atol=1e-5)
    m = model.method
    q, k, v = (torch.randn(1, 4, 6, 16) for _ in range(3))
    pos = torch.arange(6)
    # the interface's way (state last, positional or by keyword) and the plugin's own way
    want = Natural.attend(m, q, k, v, pos, pos, 0)
    assert torch.equal(m.attend(q, k, v, pos, pos, 0, None), want)
    assert torch.equal(m.attend(q, k, v, pos, pos, layer=0, state=None), want)
    assert torch.equal(m.attend(q, k, v, pos, pos, 0), want)
    assert torch.equal(m.embed(q[0, 0], pos, None), Natural.embed(m, q[0, 0], pos))


def test_an_adapted_copy_computes_with_its_own_parameters(plugin):
    model = build_model(ModelConfig(d_model=64, n_heads=4, method=plugin(Natural)))
    twin = copy.deepcopy(model.method)  # the conformance kit's float64 reference is such a copy
    with torch.no_grad():
        twin.gain.mul_(3.0)
    q, k, v = (torch.randn(1, 4, 6, 16) for _ in range(3))
    pos = torch.arange(6)
    assert torch.equal(twin.attend(q, k, v, pos, pos, 0, None), Natural.attend(twin, q, k, v, pos, pos, 0))
    assert not torch.equal(twin.attend(q, k, v, pos, pos, 0, None), model.method.attend(q, k, v, pos, pos, 0, None))


@pytest.mark.parametrize("cls", [StateRequired, ScaledRaw], ids=lambda c: c.name)
def test_plugins_written_without_state_pass_the_conformance_kit(plugin, cls):
    name = plugin(cls)
    results = testing.run_all(name, dtypes=(torch.float32,))
    assert results == {f"{check}/float32": None for check in testing.CHECKS}


def test_the_kit_still_catches_what_a_hook_without_state_gets_wrong(plugin):
    # Natural's attend cannot tell raw keys (state None) from encoded ones: the kit says so.
    name = plugin(Natural)
    results = testing.run_all(name, dtypes=(torch.float32,))
    assert "differ from attend on raw q, k" in results["prepared_attend/float32"]
    assert results["causal/float32"] is None and results["kv_decode/float32"] is None


def test_builtin_hooks_are_not_wrapped():
    for name in registry.names():
        model = build_model(ModelConfig(d_model=64, n_heads=4, method=name))
        assert not {"embed", "encode_qk", "attend"} & set(vars(model.method)), name


UNWORKABLE_FILE = """
from posbench.core.method import PositionMethod
from posbench.core.registry import register


@register
class Unworkable(PositionMethod):
    name = "unworkable_hooks"

    def embed(self, x):
        return x
"""


@pytest.mark.subprocess
def test_a_signature_that_cannot_work_is_one_line_reported_once(plugin, capsys, tmp_path):
    name = plugin(Unworkable)
    line = (
        "method 'unworkable_hooks': embed takes (x); allowed: embed(self, x, pos, state) or "
        "embed(self, x, pos) (see posbench.core.method)"
    )
    assert interface_problem(Unworkable) == line
    with pytest.raises(TypeError) as err:
        adapt_hooks(Unworkable(ModelConfig()))
    assert str(err.value) == line
    assert testing.run_all(name) == {testing.INTERFACE: f"{name}: {line}"}

    from posbench.cli import app as cli

    registry.unregister(name)  # `check` imports method files in a child process: the same class, from a file
    plugin_dir = tmp_path / "plugins"
    plugin_dir.mkdir()
    (plugin_dir / "unworkable.py").write_text(UNWORKABLE_FILE)
    assert cli.main(["check", name, "--methods-dir", str(plugin_dir)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [f"  {testing.INTERFACE:<26} FAIL: {line}", "0 passed, 1 failed, 0 unavailable here"]


@pytest.mark.parametrize(
    "source, what",
    [
        (
            "def prepare(self, q_pos, k_pos):\n        return None",
            "prepare takes (q_pos, k_pos); allowed: prepare(self, q_pos, k_pos, dtype)",
        ),
        (
            "def attend(self, q, k, v, q_pos, k_pos, layer, *, scale):\n        return q",
            "attend takes (q, k, v, q_pos, k_pos, layer, scale)",
        ),
        ("def encode_qk(self, q, k, layer, state, extra):\n        return q, k", "encode_qk takes (q, k, layer, state, extra)"),
    ],
    ids=["prepare", "required-keyword", "extra-argument"],
)
def test_each_unworkable_hook_is_named(source, what):
    namespace = {}
    exec(f"class Bad(PositionMethod):\n    name = 'bad'\n    {source}\n", {"PositionMethod": PositionMethod}, namespace)
    assert interface_problem(namespace["Bad"]).startswith(f"method 'bad': {what}")


def test_hooks_with_args_and_kwargs_are_left_alone():
    class Loose(PositionMethod):
        name = "loose"

        def attend(self, *args, **kwargs):
            return causal_attention(*args[:3])

    assert interface_problem(Loose) is None
    assert "attend" not in vars(adapt_hooks(Loose(ModelConfig())))

"""Every registered method against the conformance kit, plus proof that the kit catches faults."""

import pytest
import torch
import yaml

from posbench.core import conformance as testing
from posbench.core import registry
from posbench.core.method import PositionMethod, causal_attention
from posbench.core.outcome import Unavailable
from posbench.core.registry import register
from posbench.run.suite.loading import SUITES_DIR
from tests.helpers.marks import SLOW_WHEN_INTERPRETED, interpreted

METHODS = registry.names()
# the checks that decode token by token beyond the kit's length (the window checks: two layouts)
DECODING = ("kv_decode", "window", "gqa_window")
# `slow` (left out by `make test-fast`, run by `make test`): the Triton methods where their kernels are
# interpreted (tests/helpers/marks.py); the kv_decode check, token by token (seconds per method;
# tests/tasks/test_decode_run.py and tests/core/test_model.py check decoding in the quick set); and
# every check again in bfloat16 (the quick set runs them all in float32).
METHOD_PARAMS = [pytest.param(m, marks=SLOW_WHEN_INTERPRETED) if interpreted(m) else m for m in METHODS]
CHECK_PARAMS = [pytest.param(c, marks=pytest.mark.slow) if c in DECODING else c for c in testing.CHECKS]
DTYPE_PARAMS = [
    pytest.param(d, marks=pytest.mark.slow if d == torch.bfloat16 else [], id=str(d).removeprefix("torch."))
    for d in testing.DTYPES
]


@pytest.mark.parametrize("dtype", DTYPE_PARAMS)
@pytest.mark.parametrize("check", CHECK_PARAMS)
@pytest.mark.parametrize("method", METHOD_PARAMS)
def test_conformance(method, check, dtype):
    if testing.interface_problem(method):  # every check would fail with the same line
        pytest.skip(f"{method}: its hooks cannot be called, see test_interface[{method}]")
    reason = testing.unavailable(method, dtype)
    if reason:
        pytest.skip(f"{method} unavailable in {dtype} on cpu: {reason}")
    try:
        testing.CHECKS[check](method, dtype, "cpu")
    except Unavailable as exc:
        # a layout the method declines (fox under grouped-query attention): one line naming the
        # method, never silently ignored (issue 40)
        assert check in ("gqa", "window", "gqa_window") and str(exc).startswith(f"{method}: ") and "\n" not in str(exc), str(exc)


@pytest.mark.parametrize("method", METHODS)
def test_interface(method):
    """Every hook takes the interface's arguments, with or without ``state`` (once per method)."""
    problem = testing.interface_problem(method)
    assert problem is None, problem


def test_all_builtin_methods_found():
    assert {"sinusoidal", "rotary", "t5_bias", "alibi", "nope"} <= set(METHODS)


# --- deliberately broken methods: the kit must catch each fault --------------------------------


@pytest.fixture
def temporary_method():
    added = []

    def add(cls):
        register(cls)
        added.append(cls.name)
        return cls.name

    yield add
    for name in added:
        registry.unregister(name)


class Peeking(PositionMethod):
    """Attends to the future: no causal mask."""

    name = "broken_peeking"

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)


class IndexPositions(PositionMethod):
    """Ignores the positions it is given and uses the index in the chunk: breaks KV decoding."""

    name = "broken_index_positions"

    def embed(self, x, pos, state=None):
        # A ramp across channels (a constant shift would vanish in LayerNorm).
        ramp = torch.linspace(-1, 1, x.shape[-1], dtype=x.dtype)
        return x + torch.arange(x.shape[1], dtype=x.dtype)[None, :, None] * ramp * 0.1


class DeadParameter(PositionMethod):
    """Owns a parameter that never takes part in the computation."""

    name = "broken_dead_parameter"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.unused = torch.nn.Parameter(torch.zeros(3))


class Noisy(PositionMethod):
    """Adds fresh noise every call: not deterministic."""

    name = "broken_noisy"

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return causal_attention(q, k, v) + torch.randn_like(q) * 1e-3


class NonFiniteLong(PositionMethod):
    """Gives NaN beyond the training length."""

    name = "broken_long"

    def embed(self, x, pos, state=None):
        return x + torch.where(pos[None, :, None] >= testing.TRAIN_LEN, float("nan"), 0.0).to(x.dtype)


class ScaledKeysOnlyInModel(PositionMethod):
    """Scales keys in encode_qk, but its attend on raw q, k (state None) forgets to: the model and
    a direct call disagree."""

    name = "broken_scaled_keys"

    def encode_qk(self, q, k, layer, state):
        return q, k * 2.0

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        return causal_attention(q, k, v)


class NoPositions(PositionMethod):
    """attend takes no positions and no layer: nothing the model could call."""

    name = "broken_no_positions"

    def attend(self, q, k, v):
        return causal_attention(q, k, v)


def test_a_plugin_whose_hook_cannot_work_gets_one_line_naming_the_hook(temporary_method):
    # (A hook without state works: tests/core/test_method.py.)
    name = temporary_method(NoPositions)
    with pytest.raises(TypeError) as err:
        testing.build(name)
    assert str(err.value) == (
        "method 'broken_no_positions': attend takes (q, k, v); allowed: "
        "attend(self, q, k, v, q_pos, k_pos, layer, state) or "
        "attend(self, q, k, v, q_pos, k_pos, layer) (see posbench.core.method)"
    )


class RoundedTable(PositionMethod):
    """Sinusoidal embeddings from a plain buffer: ``model.to(bfloat16)`` rounds its inv_freq."""

    name = "broken_rounded_table"

    def __init__(self, cfg):
        super().__init__(cfg)
        d = cfg.d_model
        self.register_buffer("inv_freq", 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d), persistent=False)

    def embed(self, x, pos, state=None):
        ang = pos.float()[:, None] * self.inv_freq.float()[None, :]
        return x + torch.cat([ang.sin(), ang.cos()], dim=-1).to(x.dtype)[None]


def test_kit_catches_a_position_table_rounded_by_model_to(temporary_method):
    name = temporary_method(RoundedTable)
    testing.check_far_positions(name, torch.float32, "cpu")  # fine in float32
    with pytest.raises(testing.ConformanceError, match="embed at positions near 16384 in bfloat16"):
        testing.check_far_positions(name, torch.bfloat16, "cpu")


def test_position_buffers_stay_float32_through_casts():
    from posbench.core.method import ModelConfig

    for name in ("sinusoidal", "rotary", "alibi"):
        m = registry.build(ModelConfig(method=name))
        (buf_name,) = m._position_buffers
        assert getattr(m.to(torch.bfloat16), buf_name).dtype == torch.float32
        assert getattr(m.half(), buf_name).dtype == torch.float32
        assert getattr(m.double(), buf_name).dtype == torch.float64  # a wider reference keeps its width


@pytest.mark.parametrize(
    "cls, check, message",
    [
        (Peeking, "causal", "changed"),
        (IndexPositions, "kv_decode", "KV-cache decode differs"),
        (DeadParameter, "gradients", "no gradient reached parameter method.unused"),
        (Noisy, "deterministic", "different outputs"),
        (NonFiniteLong, "long", "non-finite"),
        (ScaledKeysOnlyInModel, "prepared_attend", "differ from attend on raw q, k"),
    ],
)
def test_kit_catches_broken_method(temporary_method, cls, check, message):
    name = temporary_method(cls)
    with pytest.raises(testing.ConformanceError, match=message):
        testing.CHECKS[check](name, torch.float32, "cpu")


def test_run_all_reports_each_check(temporary_method):
    name = temporary_method(Peeking)
    results = testing.run_all(name, dtypes=(torch.float32,))
    assert set(results) == {f"{c}/float32" for c in testing.CHECKS}
    assert "changed" in results["causal/float32"]
    assert results["shapes/float32"] is None


def test_run_each_gives_each_outcome_before_running_the_next_check(temporary_method, monkeypatch):
    """What ``make gpu-check`` prints line by line, so a step that runs out of time shows what passed."""
    name = temporary_method(Peeking)
    ran = []
    monkeypatch.setattr(testing, "_outcome", lambda fn, method, dtype, device: ran.append(fn) or None)
    each = testing.run_each(name, dtypes=(torch.float32,))
    assert next(each) == ("shapes/float32", None) and ran == [testing.CHECKS["shapes"]]
    assert [key for key, _ in each] == [f"{c}/float32" for c in testing.CHECKS][1:]


def _suite_compositions() -> list[str]:
    """Every composed name a suite file or one of its profiles lists."""
    names = set()
    for path in SUITES_DIR.glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        for holder in [data, *(data.get("profiles") or {}).values()]:
            methods = holder.get("methods") or []
            names |= {m for m in (methods if isinstance(methods, list) else []) if "+" in m}
    return sorted(names)


@pytest.mark.parametrize("name", _suite_compositions() + ["rotary+qknorm+gate", "rotary+sink", "pope+sink"])
def test_compositions_the_suites_name_pass_the_kit(name):
    for fn in testing.CHECKS.values():
        if testing.unavailable(name, torch.float32) is None:
            fn(name, torch.float32, "cpu")

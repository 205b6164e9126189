"""Every registered method traces as one graph under torch.compile, in evaluation and in a training
step, on the tiny model at lengths that cross the blocked plans with their threshold lowered (the
mission and bias methods: ``tests/attention/test_routes.py``, helpers in
tests/helpers/graph_breaks.py). Issue 45: the scaled rotary rows broke an evaluation 4 times (reading
L_train and the last key position), fox 6 (evaluation) and 7 (training) on its path choice. The
scaled rows now read both as Python ints, fox picks its path with ``torch.cond``; eager numbers are
unchanged and the traced ones equal them."""

import sys

import pytest
import torch

from posbench.core import registry
from posbench.core.model import TransformerLM, build_model, model_config
from posbench.triton_kernels import FusedKernelMethod
from tests.helpers.graph_breaks import BIAS, LENGTHS, MISSION, break_reasons, fresh_dynamo, short_blocks  # noqa: F401

# Registered methods that cannot trace whole: name -> (evaluation's, training's break reasons, the
# first line of each as ``break_reasons`` gives them), each documented in docs/attention-plans.md ("Under
# torch.compile"). Every registered method traces today.
CANNOT_TRACE: dict[str, tuple[list[str], list[str]]] = {}

METHODS = sorted(set(registry.names()) - set(MISSION + BIAS)) + [f"rotary+{m}" for m in sorted(registry.modifiers())]
METHODS += ["rotary+ssmax+qknorm+sink+gate"]  # every modifier at once
# Issue 58's methods and compositions trace at one length, LENGTHS[0] (128: path's two 64-position
# blocks), to keep make test's time: the other lengths cross no plan of theirs.
ONE_LENGTH = dict.fromkeys(
    ["fope", "pope", "stickbreaking", "path", "path_fox", "rnope_swa", "swan", "irope"]
    + ["rotary+gate", "rotary+qknorm", "rotary+sink", "rotary+ssmax+qknorm+sink+gate"],
    LENGTHS[0],
)
# Tracing takes seconds per method: the fast run traces fox and one scaled row in blocks (the value
# tests below trace every row, fullgraph); the slow tests every method at every length.
FAST = ("fox", "rotary_yarn")
L_TRAIN = 64  # the scaled rows' training length: LENGTHS are below, just beyond and twice beyond it


def _model(name: str, length: int = L_TRAIN, **options) -> TransformerLM:
    """The tiny model (2 layers) after one eager training forward of ``length`` tokens: a scaled
    rotary row records L_train there. A method unavailable on a CPU skips."""
    torch.manual_seed(0)
    model = build_model(model_config("tiny", name, n_layers=2, method_options=options))
    why = model.method.unavailable(torch.device("cpu"), torch.float32)
    if why is None and isinstance(model.method, FusedKernelMethod):  # TRITON_INTERPRET=1 (tests/conftest.py)
        why = "on a CPU its Triton kernels run under the interpreter (numpy), which dynamo cannot trace"
    if why:
        pytest.skip(f"{name}: {why}")
    with torch.no_grad():
        model.train()(torch.randint(0, 256, (1, length)))
    return model


def _scaled(name: str) -> bool:
    return getattr(registry.build(model_config("tiny", name)), "scaling", "none") != "none"


SCALED = [n for n in registry.names() if _scaled(n)]


def _traced(fn, backend="eager"):
    return torch.compile(fn, backend=backend, fullgraph=True)


# --- no graph break -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "length, name",
    [
        pytest.param(length, name, marks=[] if length == LENGTHS[0] and name in FAST else pytest.mark.slow)
        for length in LENGTHS
        for name in METHODS
        if ONE_LENGTH.get(name, length) == length
    ],
)
def test_every_method_traces_in_one_graph(name, length, monkeypatch):
    """Evaluation (a scaled row below, just beyond and twice beyond its L_train) and a training
    step's forward and backward: no break, or exactly the documented ones."""
    short_blocks(monkeypatch)
    model = _model(name)
    x = torch.randint(0, 256, (2, length))
    with torch.no_grad():
        evaluation = break_reasons(model.eval(), x)
    torch._dynamo.reset()
    training = break_reasons(lambda x: model.train()(x).float().square().mean(), x)
    assert (evaluation, training) == CANNOT_TRACE.get(name, ([], []))


def test_methods_that_cannot_trace_are_registered_and_documented():
    with open("docs/attention-plans.md") as f:
        doc = f.read().split("### Under torch.compile")[1].split("\n### ")[0]
    for name in CANNOT_TRACE:
        assert name in registry.names() and f"`{name}`" in doc


# --- the scaled rotary rows: L_train and the evaluation length as Python ints -------------------------

SETTINGS = [(n, {}) for n in SCALED] + [
    ("rotary_pi", {"factor": 4.0}),
    ("rotary_dynamic_ntk", {"factor": 2.0}),
    ("rotary_yarn", {"factor": 4.0}),
    ("rotary_llama3", {"factor": 8.0}),
    ("rotary_longrope", {"factor": 4.0}),
    ("rotary_yarn", {"train_len": 48}),
]


@pytest.mark.parametrize("length", [40, L_TRAIN, 100])  # below, at and beyond L_train
@pytest.mark.parametrize("name, options", SETTINGS, ids=[f"{n}{o or ''}" for n, o in SETTINGS])
def test_scaled_rotary_angles_traced_equal_eager_and_frequencies(name, options, length):
    """cos and sin as ``prepare`` hands them to the layers: eager equal to the frequencies the
    method reports (``frequencies``, what ``bench.py verify`` checks), traced equal to eager."""
    m = _model(name, L_TRAIN, **options).eval().method
    pos = torch.arange(length)
    eager = m.prepare(pos, pos, torch.float32)
    theta, mscale = m.frequencies(length)  # (hd/2,) float64, attention factor
    ang = pos.double()[:, None] * theta[None, :]
    assert torch.equal(eager.cos, (ang.cos() * mscale).float()) and torch.equal(eager.sin, (ang.sin() * mscale).float())
    traced = _traced(lambda p: m.prepare(p, p, torch.float32))(pos)
    assert torch.equal(traced.cos, eager.cos) and torch.equal(traced.sin, eager.sin)
    assert traced.in_encode == eager.in_encode


@pytest.mark.parametrize("name", [n if n == "rotary_dynamic_ntk" else pytest.param(n, marks=pytest.mark.slow) for n in SCALED])
def test_scaled_rotary_model_traced_equals_eager_beyond_train_len(name):
    model = _model(name, L_TRAIN).eval()
    x = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        torch.testing.assert_close(_traced(model)(x), model(x), rtol=1e-5, atol=1e-5)


def test_compiled_scaled_rotary_takes_key_positions_from_zero():
    model = _model("rotary_dynamic_ntk", L_TRAIN).eval()
    x = torch.randint(0, 256, (1, 100))
    with torch.no_grad():
        model(x, pos=torch.arange(100) + 7)  # eager reads the last position
        with pytest.raises(RuntimeError, match="compiled scaled rotary evaluation takes key positions as 0 .. L-1"):
            _traced(model)(x, pos=torch.arange(100) + 7)


def test_compiled_scaled_rotary_reads_trained_len_on_eval_and_on_load():
    """A graph takes L_train as read when the model entered eval mode or loaded a state dict; a
    buffer changed since is a one-line error when the graph runs, not a stale factor."""
    model = _model("rotary_pi", L_TRAIN).eval()
    assert model.method.trained_len_read == L_TRAIN
    compiled = _traced(model)
    x = torch.randint(0, 256, (1, 100))
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.method.trained_len.fill_(32)
        with pytest.raises(RuntimeError, match="trained_len changed after the model entered eval mode"):
            compiled(x)
        model.eval()
        assert model.method.trained_len_read == 32
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)
        model.load_state_dict(_model("rotary_pi", 48).state_dict())
        assert model.method.trained_len_read == 48 and not model.method.training
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-5)


# --- fox: the key column or the bias, chosen by a torch.cond ----------------------------------------


@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=pytest.mark.slow)])
@pytest.mark.parametrize("gate_bias, path", [(0.0, "_key_column"), (-30.0, "_gate_bias")])
def test_fox_traces_both_paths_and_matches_eager(gate_bias, path, backend):
    """|F| within LINEAR_SPAN takes the key column, beyond it the bias (at gate bias -30, |F| reaches
    ~30 x 127); the traced forward and gradients equal eager's on either path. ``aot_eager`` traces
    the backward too (torch.cond's aliasing and layout checks)."""
    model = _model("fox", 128, gate_bias=gate_bias)
    fox = sys.modules[type(model.method).__module__]
    taken = []

    def spy(name, fn):
        return lambda *a: taken.append(name) or fn(*a)

    x = torch.randint(0, 256, (2, 128))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("_key_column", "_gate_bias"):
            mp.setattr(fox, name, spy(name, getattr(fox, name)))
        model(x)
    assert set(taken) == {path}

    def loss(x):
        return model(x).float().square().mean()

    params = list(model.method.parameters()) + [model.tok.weight]
    eager, traced = (torch.autograd.grad(f(x), params) for f in (loss, _traced(loss, backend)))
    for e, t in zip(eager, traced):
        torch.testing.assert_close(t, e, rtol=1e-4, atol=1e-6)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(_traced(model, backend)(x), model(x), rtol=1e-5, atol=1e-5)

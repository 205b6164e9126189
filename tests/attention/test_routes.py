"""Under torch.compile the mission and bias methods trace as one graph at every length, evaluation and
training: from ``BLOCKED_MIN_ROWS`` queries on a CPU a bias method attends by blocks
(``posbench.attention.routes``), where reading a position or a slope (``.item()``), a tile's storage
offset or a tile source's state changed in backward each broke the graph (issue 45: alibi 3, t5_bias
11, kerple_log 11, fire 14 breaks at L 1024 in evaluation). A break puts Python between graphs into
a method's compiled time. The break counter is dynamo's ``ExplainWithBackend`` (what
``torch._dynamo.explain`` counts with) on the ``eager`` backend (no inductor): the graphs it counts
run as traced and must match the eager model."""

import pytest
import torch
import torch._dynamo

from posbench.attention import routes
from posbench.attention.form import BiasForm
from posbench.core import registry
from posbench.core.model import TransformerLM, build_model, model_config
from tests.helpers.graph_breaks import (  # noqa: F401  (fresh_dynamo: autouse fixture)
    BIAS,
    LENGTHS,
    MISSION,
    break_reasons,
    fresh_dynamo,
    short_blocks,
    traced,
    trained_tiny_model,
)

OTHERS = ["nope", "xpos", "learned", "p_rope", "randomized", "rope_nope_hybrid"]
# The blocked plans at their own threshold and block size once (t5_bias at L 1024: 16 blocks of 64
# rows); else with the threshold lowered (``short_blocks``) at each of LENGTHS: blocks, the masked
# bias, blocks with a short last one (the last two with the slow tests).
CASES = [pytest.param("t5_bias", 1024, False, id="t5_bias-1024-default-blocks")] + [
    pytest.param(method, length, True, id=f"{method}-{length}", marks=[] if length == LENGTHS[0] else pytest.mark.slow)
    for method in sorted(set(MISSION + BIAS))
    for length in LENGTHS
]


def _model(method: str) -> TransformerLM:
    torch.manual_seed(0)
    return build_model(model_config("tiny", method, n_layers=2))


@pytest.mark.parametrize("method, length, short", CASES)
def test_method_traces_in_one_graph_and_matches_eager(method, length, short, monkeypatch):
    """Evaluation (no_grad) and a training step's forward and backward: no graph break; the
    dynamo-traced forward equals the eager one, and so do the gradients."""
    if short:
        short_blocks(monkeypatch)
    model = _model(method)
    x = torch.randint(0, 256, (2, length))
    model.eval()
    with torch.no_grad():
        out, reasons = traced(model, x)
        assert reasons == []
        torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-5)
    model.train()

    def loss(x):
        return model(x).float().square().mean()

    traced_loss, reasons = traced(loss, x)
    assert reasons == []
    params = list(model.method.parameters()) + [model.tok.weight]
    for eager, got in zip(torch.autograd.grad(loss(x), params), torch.autograd.grad(traced_loss, params)):
        torch.testing.assert_close(got, eager, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("method", OTHERS)
def test_other_methods_trace_in_one_graph_at_the_blocked_length(method):
    model = _model(method)
    x = torch.randint(0, 256, (1, 1024))
    assert break_reasons(lambda x: model(x).float().mean(), x) == []


def test_compiled_plan_checks_integer_positions_are_consecutive(monkeypatch):
    """A compiled graph cannot branch on positions: integer positions are taken as consecutive (the
    model's own) and the graph asserts it; non-consecutive ones get a one-line error, not a wrong
    bias. Float positions (interpolation) take the general plan, compiled or not."""
    short_blocks(monkeypatch)
    model = _model("t5_bias").eval()
    compiled = torch.compile(model, backend="eager")
    length = LENGTHS[0]  # blocks
    x = torch.randint(0, 256, (1, length))
    with torch.no_grad():
        gappy = torch.arange(length) * 2
        with pytest.raises(RuntimeError, match="takes integer positions as consecutive"):
            compiled(x, pos=gappy)
        torch.testing.assert_close(compiled(x, pos=torch.arange(length) + 7), model(x, pos=torch.arange(length) + 7))
        scaled = torch.arange(length) * 0.5
        torch.testing.assert_close(compiled(x, pos=scaled), model(x, pos=scaled), rtol=1e-5, atol=1e-5)


def test_form_max_slope_reads_the_bound_or_the_slopes():
    slopes = torch.tensor([0.5, -0.25])
    assert BiasForm(slopes=slopes).max_slope() == 0.5
    assert BiasForm(slopes=slopes, slope_bound=0.75).max_slope() == 0.75
    alibi = _model("alibi").method
    assert alibi.bias_form(torch.float32).slope_bound == float(alibi.slopes.abs().max())


def test_alibi_takes_the_linear_plan_compiled_as_eager():
    """The linear plan's span test needs no tensor read for consecutive positions, so a compiled
    ALiBi takes it too (not the dense bias)."""
    seen = []
    original = routes.choose_route

    def spy(*args):
        seen.append(original(*args))
        return seen[-1]

    model = _model("alibi").eval()
    x = torch.randint(0, 256, (1, 1024))
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        mp.setattr(routes, "choose_route", spy)
        model(x)
        torch.compile(model, backend="eager")(x)
    assert seen == [routes.LinearRoute, routes.LinearRoute]


# --- every other registered method, its modifiers and their compositions ------------------------
# Issue 45: the scaled rotary rows broke an evaluation 4 times (reading L_train and the last key
# position), fox 6 (evaluation) and 7 (training) on its path choice. The scaled rows now read both
# as Python ints (tests/methods/test_rotary.py), fox picks its path with ``torch.cond``
# (tests/methods/test_fox.py); eager numbers are unchanged and the traced ones equal them.

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
# tests of tests/methods/test_rotary.py trace every row, fullgraph); the slow tests every method at
# every length.
FAST = ("fox", "rotary_yarn")


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
    model = trained_tiny_model(name)
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

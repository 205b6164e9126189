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
from posbench.core.model import TransformerLM, build_model, model_config
from tests.helpers.graph_breaks import BIAS, LENGTHS, MISSION, break_reasons, fresh_dynamo, short_blocks, traced  # noqa: F401

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

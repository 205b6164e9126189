"""Under torch.compile the mission and bias methods trace as one graph at every length, evaluation and
training: from ``BLOCKED_MIN_ROWS`` queries on a CPU a bias method attends by blocks
(``posbench.attention.plans``), where reading a position or a slope (``.item()``), a tile's storage
offset or a tile source's state changed in backward each broke the graph (issue 45: alibi 3, t5_bias
11, kerple_log 11, fire 14 breaks at L 1024 in evaluation). A break puts Python between graphs into
a method's compiled time. The break counter is ``torch._dynamo.explain``; the traced graphs run with
dynamo's ``eager`` backend (no inductor) and must match the eager model."""
import pytest
import torch
import torch._dynamo

from posbench.attention import plans
from posbench.attention.form import BiasForm
from posbench.core.model import TransformerLM, model_config
from tests.helpers.graph_breaks import BIAS, MISSION, break_reasons, fresh_dynamo  # noqa: F401  (autouse fixture)

OTHERS = ["nope", "xpos", "learned", "p_rope", "randomized", "rope_nope_hybrid"]
# L 1024: the blocked plans (16 blocks of 64 rows); 300: the masked bias, below BLOCKED_MIN_ROWS;
# 517: blocked with a short last block. Tracing 16 blocks per layer takes seconds: the other
# lengths run with the slow tests.
LENGTHS = [1024, pytest.param(300, marks=pytest.mark.slow), pytest.param(517, marks=pytest.mark.slow)]


def _model(method: str) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(model_config("tiny", method, n_layers=2))


@pytest.mark.parametrize("length", LENGTHS)
@pytest.mark.parametrize("method", sorted(set(MISSION + BIAS)))
def test_method_traces_in_one_graph_and_matches_eager(method, length):
    """Evaluation (no_grad) and a training step's forward and backward: no graph break; the
    dynamo-traced forward equals the eager one, and so do the gradients."""
    model = _model(method)
    x = torch.randint(0, 256, (2, length))
    model.eval()
    with torch.no_grad():
        assert break_reasons(model, x) == []
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(model, backend="eager")(x), model(x), rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()
    model.train()

    def loss(x):
        return model(x).float().square().mean()

    assert break_reasons(loss, x) == []
    torch._dynamo.reset()
    grads = [torch.autograd.grad(f(x), list(model.method.parameters()) + [model.tok.weight])
             for f in (loss, torch.compile(loss, backend="eager"))]
    for eager, traced in zip(*grads):
        torch.testing.assert_close(traced, eager, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("method", OTHERS)
def test_other_methods_trace_in_one_graph_at_the_blocked_length(method):
    model = _model(method)
    x = torch.randint(0, 256, (1, 1024))
    assert break_reasons(lambda x: model(x).float().mean(), x) == []


def test_compiled_plan_checks_integer_positions_are_consecutive():
    """A compiled graph cannot branch on positions: integer positions are taken as consecutive (the
    model's own) and the graph asserts it; non-consecutive ones get a one-line error, not a wrong
    bias. Float positions (interpolation) take the general plan, compiled or not."""
    model = _model("t5_bias").eval()
    compiled = torch.compile(model, backend="eager")
    x = torch.randint(0, 256, (1, 600))
    with torch.no_grad():
        gappy = torch.arange(600) * 2
        with pytest.raises(RuntimeError, match="takes integer positions as consecutive"):
            compiled(x, pos=gappy)
        torch.testing.assert_close(compiled(x, pos=torch.arange(600) + 7), model(x, pos=torch.arange(600) + 7))
        scaled = torch.arange(600) * 0.5
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
    original = plans.choose_plan

    def spy(*args):
        seen.append(original(*args))
        return seen[-1]

    model = _model("alibi").eval()
    x = torch.randint(0, 256, (1, 1024))
    with pytest.MonkeyPatch.context() as mp, torch.no_grad():
        mp.setattr(plans, "choose_plan", spy)
        model(x)
        torch.compile(model, backend="eager")(x)
    assert seen == [plans.LinearPlan, plans.LinearPlan]

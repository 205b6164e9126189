"""Under torch.compile, the mission's methods trace as one graph, as sinusoidal does: a graph break
per layer (a cache keyed on storage pointers, an out= write into a view) would put Python between
graphs into a method's compiled time, a cost of our code rather than of the method."""

import pytest
import torch
import torch._dynamo

from posbench.core.model import build_model, model_config


@pytest.mark.parametrize("method", ["sinusoidal", "rotary", "alibi", "t5_bias"])
def test_method_traces_without_graph_breaks_and_matches_eager(method):
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = build_model(model_config("tiny", method, n_layers=2)).eval()
    x = torch.randint(0, 256, (1, 37))
    explained = torch._dynamo.explain(model)(x)
    assert explained.graph_break_count == 0, [str(r.reason).splitlines()[0] for r in explained.break_reasons]
    with torch.no_grad():
        eager = model(x)
        traced = torch.compile(model, backend="eager")(x)  # dynamo's graph, run without inductor
    torch.testing.assert_close(traced, eager, rtol=1e-5, atol=1e-5)
    torch._dynamo.reset()

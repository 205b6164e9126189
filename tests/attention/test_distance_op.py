"""Compiled, a distance-row bias (t5_bias, kerple_log) attends through one opaque op per layer
(posbench/attention/distance_op.py): equal bit for bit to the eager blocked path (output, evaluation
and every gradient), its fake kernels and autograd right (``torch.library.opcheck``), and a compiled
model's graph holds one op per layer and none of the blocks' matrix products (issue 45: inductor's
rewrite of the traced loop cost t5_bias 0.58x nope's speed at L 2048)."""

import pytest
import torch

from posbench.attention.blocked import blocked_bias_attention
from posbench.attention.distance_op import distance_attention
from posbench.attention.tiles import DistanceRow
from posbench.core.model import build_model, model_config
from tests.helpers.graph_breaks import fresh_dynamo  # noqa: F401  (autouse fixture)

# (Tq, Tk, window, heads in the row): odd lengths, a prefill after a cache (Tq < Tk), a window,
# a window wider than the keys (taken as none), one row shared by every head
CASES = [(130, 130, None, 3), (75, 200, None, 3), (130, 130, 40, 3), (97, 97, 100, 3), (70, 70, None, 1)]
OPS = torch.ops.posbench


def _inputs(tq, tk, heads_in_row, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, t, 16, generator=g).to(dtype).requires_grad_() for t in (tq, tk, tk))
    row = torch.randn(heads_in_row, tk, generator=g).to(dtype).requires_grad_()
    return q, k, v, row


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("tq, tk, window, heads_in_row", CASES)
def test_compiled_distance_attention_equals_the_eager_blocked_path(dtype, tq, tk, window, heads_in_row):
    q, k, v, row = _inputs(tq, tk, heads_in_row, dtype, seed=tq + tk)
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    eager = blocked_bias_attention(q, k, v, DistanceRow(row, tk, 32, cdt), (row,), 32, window)
    dout = torch.randn_like(eager)
    want = torch.autograd.grad(eager, (q, k, v, row), dout)
    compiled = torch.compile(lambda q, k, v, row: distance_attention(q, k, v, row, 32, window), fullgraph=True)
    out = compiled(q, k, v, row)
    assert torch.equal(out, eager)
    for got, ref in zip(torch.autograd.grad(out, (q, k, v, row), dout), want):
        assert got.dtype == ref.dtype and got.shape == ref.shape
        assert torch.equal(got, ref)
    with torch.no_grad():  # evaluation: the forward-only op
        assert torch.equal(compiled(q, k, v, row), blocked_bias_attention(q, k, v, DistanceRow(row, tk, 32, cdt), (), 32, window))


def test_only_the_row_gradient_that_is_wanted_is_returned():
    q, k, v, row = _inputs(70, 70, 3, torch.float32, seed=0)
    row.requires_grad_(False)
    out = torch.compile(lambda q, k, v, row: distance_attention(q, k, v, row, 32), fullgraph=True)(q, k, v, row)
    out.sum().backward()
    assert row.grad is None and q.grad is not None


@pytest.mark.parametrize("window", [None, 30])
def test_ops_pass_opcheck(window):
    """Schema, fake kernels (shapes, dtypes, strides), autograd registration and dispatch."""
    q, k, v, row = _inputs(70, 70, 3, torch.float32, seed=1)
    torch.library.opcheck(OPS.distance_attention.default, (q, k, v, row, 32, window))
    with torch.no_grad():
        torch.library.opcheck(OPS.distance_attention_eval.default, (q, k, v, row, 32, window))
        out, out_rev, lse = OPS.distance_attention(q, k, v, row, 32, window)
    args = (torch.randn_like(out), [q.detach(), k.detach(), v.detach(), row.detach(), out_rev, lse], 32, window)
    for row_grad in (True, False):
        torch.library.opcheck(OPS.distance_attention_backward.default, (*args, row_grad))


@pytest.mark.parametrize("method", ["t5_bias", "kerple_log"])
def test_a_compiled_model_holds_one_op_per_layer_and_no_block_loop(method):
    """At L 1024 (16 blocks of 64 rows) the traced graph calls the op once per layer, training and
    evaluation, and holds no matrix product of its own: the blocks run inside the op."""
    torch.manual_seed(0)
    model = build_model(model_config("tiny", method, n_layers=2))
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    x = torch.randint(0, 256, (1, 1024))
    compiled = torch.compile(model, backend=backend, fullgraph=True)
    compiled(x).float().mean().backward()
    with torch.no_grad():
        model.eval()
        compiled(x)
    assert len(graphs) == 2  # training, then evaluation
    for gm, op in zip(graphs, ("posbench.distance_attention", "posbench.distance_attention_eval")):
        targets = [str(n.target).removesuffix(".default") for n in gm.graph.nodes if n.op == "call_function"]
        assert targets.count(op) == 2, targets
        assert not [t for t in targets if "bmm" in t or "flash" in t or "unfold" in t]

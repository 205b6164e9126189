"""PaTH's attention by the chunked UT transform (posbench/attention/householder.py) against the
exact scan ``path_scores`` and a plain softmax: float64 to rounding, float32 to float32's, values
and gradients, odd lengths, decode rows, windows and forget gates."""

import pytest
import torch
import torch.nn.functional as F

from posbench.attention.householder import path_attention, path_scores
from posbench.core.masked import mask_bias


def reference(q, k, v, w, beta, gate=None, window=None):
    """softmax(path_scores + F_i - F_j), masked causally (and by ``window``), times v."""
    scores = path_scores(q, k, w, beta)
    tq, tk = q.shape[-2], k.shape[-2]
    if gate is not None:
        scores = scores + gate[..., tk - tq :, None] - gate[..., None, :]
    return mask_bias(scores, window).softmax(-1) @ v


def inputs(tq, tk, seed, dtype=torch.float64, d=6, dv=5, beta_max=2.0):
    """q, k, v, unit w, beta in [0, beta_max), F = cumsum(log f): (B 2, H 3) heads, leaves."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, tq, d, generator=g, dtype=dtype)
    k = torch.randn(2, 3, tk, d, generator=g, dtype=dtype)
    v = torch.randn(2, 3, tk, dv, generator=g, dtype=dtype)
    w = F.normalize(torch.randn(2, 3, tk, d, generator=g, dtype=dtype), dim=-1)
    beta = beta_max * torch.rand(2, 3, tk, generator=g, dtype=dtype)
    gate = F.logsigmoid(torch.randn(2, 3, tk, generator=g, dtype=dtype)).cumsum(-1)
    return [x.requires_grad_() for x in (q, k, v, w, beta, gate)]


def values_and_grads(fn, args):
    out = fn(*args)
    torch.manual_seed(0)
    out.backward(torch.randn_like(out))
    grads = [a.grad.clone() for a in args]
    for a in args:
        a.grad = None
    return [out.detach(), *grads]


CASES = [  # (Tq, Tk, chunk, window): whole sequences, decode rows (Tq < Tk), windows
    (37, 37, 8, None),
    (100, 100, 16, None),
    (129, 129, 64, None),
    (5, 8, 8, None),
    (16, 16, 16, None),
    (130, 130, 16, None),
    (1, 37, 8, None),
    (7, 100, 16, None),
    (40, 129, 64, None),
    (70, 70, 16, 23),
    (3, 40, 8, 9),
    (37, 37, 4, 1),
]


@pytest.mark.parametrize("gated", [False, True], ids=["path", "path_fox"])
@pytest.mark.parametrize("tq,tk,chunk,window", CASES)
def test_chunked_ut_equals_the_scan_in_float64(tq, tk, chunk, window, gated):
    args = inputs(tq, tk, seed=tk * 7 + tq)
    if not gated:
        args = args[:5]
    fast = values_and_grads(lambda q, k, v, w, b, f=None: path_attention(q, k, v, (w, b), f, window, chunk), args)
    slow = values_and_grads(lambda q, k, v, w, b, f=None: reference(q, k, v, w, b, f, window), args)
    for name, a, b in zip(["out", "dq", "dk", "dv", "dw", "dbeta", "dF"], fast, slow):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tq,tk", [(129, 129), (3, 130)])
def test_chunked_ut_in_float32_is_within_float32_rounding_of_the_scan(tq, tk, seed):
    args = inputs(tq, tk, seed, dtype=torch.float32, d=32, dv=32)
    fast = values_and_grads(lambda q, k, v, w, b, f: path_attention(q, k, v, (w, b), f, None, 64), args)
    slow = values_and_grads(reference, args)
    exact = values_and_grads(reference, [a.detach().double().requires_grad_() for a in args])
    for a, b, e in zip(fast, slow, exact):
        # the chunked path's error is of the scan's own float32 error's order
        bound = max(4 * (b.double() - e).abs().max().item(), 1e-5 * e.abs().max().item())
        assert (a.double() - e).abs().max().item() <= bound


def test_reflections_and_projections_at_the_ends_of_beta():
    # beta 2 (reflections) and 1 (projections: singular chunk transforms) stay exact
    for value in (2.0, 1.0):
        q, k, v, w, beta, _ = (a.detach() for a in inputs(50, 50, seed=3))
        beta = torch.full_like(beta, value)
        torch.testing.assert_close(
            path_attention(q, k, v, (w, beta), chunk=16), reference(q, k, v, w, beta), rtol=1e-10, atol=1e-10
        )


def test_the_backward_writes_nothing_in_place_into_the_scores():
    # the blocked path this replaced spent 73% of its backward cloning L x L gradients for index writes
    q, k, v, w, beta, gate = inputs(130, 130, seed=4)
    out = path_attention(q, k, v, (w, beta), gate, chunk=16)
    seen, todo, names = set(), [out.grad_fn], set()
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.add(type(fn).__name__)
        todo.extend(f for f, _ in fn.next_functions)
    assert not {n for n in names if "IndexPut" in n or "CopySlices" in n}, sorted(names)


def graph_names(out) -> list[str]:
    """The autograd node types behind ``out``, one entry per node."""
    seen, todo, names = set(), [out.grad_fn], []
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        names.append(type(fn).__name__)
        todo.extend(f for f, _ in fn.next_functions)
    return names


def test_the_gap_loop_is_one_node_whatever_the_length():
    """The gaps' softmax and values run as one autograd node with its own backward: the graph does
    not grow with the number of gaps (autograd through the loop gave each gap's slices a
    full-size zero gradient, a copy and an add: 6-7% of a training step at L 2048)."""
    sizes = []
    for t in (130, 260):
        q, k, v, w, beta, gate = inputs(t, t, seed=5)
        names = graph_names(path_attention(q, k, v, (w, beta), gate, chunk=16))
        assert names.count("GapSoftmaxBackward") == 1
        sizes.append(len(names))
    assert sizes[0] == sizes[1]


@pytest.mark.parametrize("tq,tk,window", [(11, 11, None), (3, 13, None), (13, 13, 6)])
def test_the_gap_loops_backward_passes_gradcheck(tq, tk, window):
    """The hand-written backward against finite differences in float64 (several gaps, decode rows,
    a window, the forget gate's gradient)."""
    q, k, v, w, beta, gate = (a.detach()[:1, :2].requires_grad_() for a in inputs(tq, tk, seed=6, d=3, dv=2))
    assert torch.autograd.gradcheck(
        lambda q, k, v, w, b, f: path_attention(q, k, v, (w, b), f, window, chunk=4), (q, k, v, w, beta, gate)
    )

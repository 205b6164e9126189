"""posbench.attention.piecewise: a ReLU MLP as its exact linear pieces, the ``PiecewiseRatio`` tiles
by query blocks against a float64 reference (outputs and the gradients of q, k, v, the u row, the z
column and the tables), and FIRE's piecewise plan against FIRE's formula in float64 (odd lengths,
Tq < Tk, query positions past the threshold and below it, every parameter's gradient)."""

import math

import pytest
import torch

from posbench.attention import routes
from posbench.attention.blocked import blocked_bias_attention
from posbench.attention.piecewise import PiecewiseRatio, RatioPieces, relu_mlp_pieces
from posbench.core import registry
from posbench.core.masked import causal_mask
from posbench.core.method import ModelConfig


def mlp(x, w1, b1, w2, b2):
    """(H, *x.shape): the plain MLP w2 relu(w1 x + b1) + b2."""
    return torch.einsum("...w,hw->h...", torch.relu(x[..., None] * w1 + b1), w2) + b2.view(-1, *[1] * x.dim())


def piecewise_reference(pieces: RatioPieces, x: torch.Tensor) -> torch.Tensor:
    """g(x) for any x: (H, *x.shape), the plain reading of the tables (a binary search per entry)."""
    seg = torch.bucketize(x, pieces.breakpoints.to(x.dtype))
    return pieces.slopes.to(x.dtype)[:, seg] * x + pieces.intercepts.to(x.dtype)[:, seg]


def weights(seed, width=32, heads=3, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    w1, b1 = torch.randn(width, generator=g), torch.randn(width, generator=g)
    w1[:3] = 0.0  # units with no breakpoint: constant relu(b1), on or off everywhere
    b1[3], w1[3] = b1[4], w1[4]  # two units with the same breakpoint
    w2, b2 = torch.randn(heads, width, generator=g), torch.randn(heads, generator=g)
    return [t.to(dtype).requires_grad_() for t in (w1, b1, w2, b2)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_relu_mlp_pieces_equal_the_mlp_and_its_weight_gradients(seed):
    w = weights(seed)
    x = torch.randn(500, generator=torch.Generator().manual_seed(seed + 10), dtype=torch.float64) * 3
    bp, slopes, intercepts = relu_mlp_pieces(*w)
    assert bp.shape == (32,) and slopes.shape == intercepts.shape == (3, 33) and (bp[1:] >= bp[:-1]).all()
    got = piecewise_reference(RatioPieces(None, None, bp, slopes, intercepts), x)
    want = mlp(x, *w)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    r = torch.randn(want.shape, dtype=torch.float64)
    for name, g, gw in zip(
        ("w1", "b1", "w2", "b2"), torch.autograd.grad((got * r).sum(), w), torch.autograd.grad((want * r).sum(), w)
    ):
        torch.testing.assert_close(g, gw, rtol=1e-10, atol=1e-10, msg=name)


def reference(q, k, v, bias):
    """float64 causal (bottom-right) softmax(q k^T / sqrt(hd) + bias) v; bias (H, Tq, Tk)."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
    scores = scores.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], "cpu"), float("-inf"))
    return torch.softmax(scores, -1) @ v


@pytest.mark.usefixtures("block_kernel")
@pytest.mark.parametrize("seed, tq, tk, rows", [(0, 37, 37, 8), (1, 13, 29, 4), (2, 1, 9, 4), (3, 64, 64, 64), (4, 50, 50, 7)])
def test_piecewise_tiles_equal_the_float64_reference_with_every_gradient(seed, tq, tk, rows):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, tq, 16, generator=g).requires_grad_()
    k, v = (torch.randn(2, 3, tk, 16, generator=g).requires_grad_() for _ in range(2))
    u = torch.log1p(0.3 * torch.arange(tk, dtype=torch.float64)).requires_grad_()  # u by distance, increasing
    z = (1.0 + torch.rand(tq, generator=g, dtype=torch.float64)).requires_grad_()  # any divisor > 0 per row
    w1, b1, w2, b2 = (t.detach() for t in weights(seed))
    b1 = b1 * 0.3  # breakpoints -b1/w1 among the x of the data (x in [0, ~2])
    bp, slopes, intercepts = relu_mlp_pieces(w1, b1, w2, b2)
    slopes, intercepts = slopes.detach().requires_grad_(), intercepts.detach().requires_grad_()
    leaves = (q, k, v, u, z, slopes, intercepts)
    d = torch.arange(tk - tq, tk)[:, None] - torch.arange(tk)[None, :]  # (Tq, Tk) distance, negative: future
    x = u[d.clamp(min=0)] / z[:, None]
    want = reference(q, k, v, piecewise_reference(RatioPieces(None, None, bp, slopes, intercepts), x))
    row = u.flip(0).float()  # row[t] = u at distance Tk - 1 - t
    pieces = RatioPieces(row, z.float(), bp.float(), slopes.float(), intercepts.float())
    got = blocked_bias_attention(
        q.float(),
        k.float(),
        v.float(),
        PiecewiseRatio(pieces, tk, rows, torch.float32),
        (row, pieces.z, pieces.slopes, pieces.intercepts),
        rows,
    )
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-6)
    r = torch.randn(want.shape, generator=g, dtype=torch.float64)
    for name, a, b in zip(
        ("dq", "dk", "dv", "du", "dz", "dslopes", "dintercepts"),
        torch.autograd.grad((got * r).sum(), leaves),
        torch.autograd.grad((want * r).sum(), leaves),
    ):
        torch.testing.assert_close(a.double(), b.double(), rtol=1e-4, atol=2e-5, msg=lambda s: f"{name}: {s}")


def fire_bias64(m, q_pos, k_pos):
    """FIRE's formula in float64 from the module's parameters (differentiable in all six)."""
    c, threshold = m.c.double().abs(), (m.L_multiplier.double() * m.init_L).abs()
    qp, kp = q_pos.double(), k_pos.double()
    x = (
        torch.log1p(c * (qp[:, None] - kp[None, :]).clamp(min=0))
        / (torch.log1p(c * torch.maximum(qp, threshold)) + m.eps)[:, None]
    )
    return mlp(x, m.w1.double(), m.b1.double(), m.w2.double(), m.b2.double())


@pytest.mark.parametrize(
    "seed, tq, tk, start, init_L", [(0, 41, 41, 0, 8.0), (1, 11, 30, 3, 16.0), (2, 33, 33, 0, 512.0), (3, 1, 13, 100, 8.0)]
)
def test_fire_piecewise_plan_equals_fire_in_float64_with_every_gradient(monkeypatch, seed, tq, tk, start, init_L):
    monkeypatch.setattr(routes, "BLOCKED_MIN_ROWS", 1)
    monkeypatch.setattr(routes, "BLOCK_ROWS", 8)
    torch.manual_seed(seed)
    m = registry.build(ModelConfig(method="fire", d_model=48, n_heads=3, method_options={"init_L": init_L}))
    with torch.no_grad():
        m.c.fill_(0.3)
        m.b1.mul_(0.3)  # breakpoints among the x of the data
    k_pos = torch.arange(start, start + tk)
    q_pos = k_pos[-tq:]
    plan = m.prepare(q_pos, k_pos, torch.float32)
    assert plan.kind == "piecewise"
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, 3, tq, 16, generator=g).requires_grad_()
    k, v = (torch.randn(2, 3, tk, 16, generator=g).requires_grad_() for _ in range(2))
    params = [m.c, m.L_multiplier, m.w1, m.b1, m.w2, m.b2]
    want = reference(q, k, v, fire_bias64(m, q_pos, k_pos))
    got = m.attend(q, k, v, q_pos, k_pos, 0, plan)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=2e-6)
    r = torch.randn(want.shape, generator=g, dtype=torch.float64)
    names = ("dq", "dk", "dv", "dc", "dL_multiplier", "dw1", "db1", "dw2", "db2")
    gots = torch.autograd.grad((got * r).sum(), [q, k, v] + params)
    wants = torch.autograd.grad((want * r).sum(), [q, k, v] + params, allow_unused=True)
    for name, a, b in zip(names, gots, wants):
        b = torch.zeros_like(a, dtype=torch.float64) if b is None else b.double()
        # b2 shifts every score of a head alike: its gradient is zero up to rounding
        torch.testing.assert_close(a.double(), b, rtol=1e-4, atol=1e-5, msg=lambda s: f"{name}: {s}")

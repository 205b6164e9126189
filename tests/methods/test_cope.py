"""cope (Contextual Position Encoding) against its paper's equations: gates, counted positions,
interpolated position logits and the npos_max clamp on hand-computed values; a float64 reference
written from the equations on random inputs."""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from tests.helpers.attention import qkv


def tiny_cope(npos_max=4):
    """One layer, one head of dimension 2; e[p] = [p^2, 0] at p = 0..npos_max-1, so a query
    [1, 0] reads q . e[p] = p^2 at integer p."""
    m = registry.build(ModelConfig(d_model=2, n_heads=1, n_layers=1, method="cope", method_options={"npos_max": npos_max}))
    with torch.no_grad():
        m.table.zero_()
        m.table[0, :, 0] = torch.arange(npos_max, dtype=torch.float32) ** 2
    return m


def weights(z):
    return torch.softmax(torch.tensor(z, dtype=torch.float64), 0)


def test_cope_with_equal_gates_counts_half_a_key_each():
    # q = [1, 0], keys [0, *] orthogonal to it: every score q . k / sqrt(2) = 0, every gate 1/2.
    # p_ij = (i - j + 1) / 2. Row 2: p = [1.5, 1, 0.5]; q . e[p] interpolated between integers:
    # 1.5 -> (1 + 4) / 2 = 2.5, 1 -> 1, 0.5 -> (0 + 1) / 2 = 0.5. Row 1: p = [1, 0.5] -> [1, 0.5].
    m = tiny_cope()
    q = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    k = torch.tensor([[[[0.0, 1.0], [0.0, -2.0], [0.0, 3.0]]]])
    v = torch.eye(3)[None, None, :, :2].clone()  # v_0 = [1, 0], v_1 = [0, 1], v_2 = [0, 0]
    pos = torch.arange(3)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0].double()
    w2, w1 = weights([2.5, 1.0, 0.5]), weights([1.0, 0.5])
    torch.testing.assert_close(out[2], w2[:2])
    torch.testing.assert_close(out[1], w1)
    torch.testing.assert_close(out[0], torch.tensor([1.0, 0.0], dtype=torch.float64))


def test_cope_gates_are_sigmoids_of_the_scaled_scores():
    # Row 1 with k_0 = [sqrt(2) ln 3, 0]: s_10 = ln 3, g_10 = 3/4; k_1 = [0, 1]: s_11 = 0, g_11 = 1/2.
    # p_10 = 3/4 + 1/2 = 5/4 -> q . e = 1 + (4 - 1) / 4 = 1.75; p_11 = 1/2 -> 0.5.
    # z_1 = [ln 3 + 1.75, 0.5].
    m = tiny_cope()
    q = torch.tensor([1.0, 0.0]).expand(1, 1, 2, 2)
    k = torch.tensor([[[[math.sqrt(2) * math.log(3), 0.0], [0.0, 1.0]]]])
    v = torch.eye(2)[None, None]
    pos = torch.arange(2)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0, 1].double()
    torch.testing.assert_close(out, weights([math.log(3) + 1.75, 0.5]))


def test_cope_clamps_positions_at_npos_max_minus_one():
    # npos_max 2: positions clamp to 1. Row 2 of the equal-gates case: p = [1.5, 1, 0.5] ->
    # [1, 1, 0.5] -> q . e = [1, 1, 0.5].
    m = tiny_cope(npos_max=2)
    q = torch.tensor([1.0, 0.0]).expand(1, 1, 3, 2)
    k = torch.tensor([[[[0.0, 1.0], [0.0, -2.0], [0.0, 3.0]]]])
    v = torch.eye(3)[None, None, :, :2].clone()
    pos = torch.arange(3)
    out = m.attend(q, k, v, pos, pos, 0)[0, 0, 2].double()
    torch.testing.assert_close(out, weights([1.0, 1.0, 0.5])[:2])


def reference(q, k, v, table, npos_max):
    """The paper's equations, loop by loop, float64: for each query i, g_ij, p_ij, z_ij."""
    q, k, v, e = q.double(), k.double(), v.double(), table.double()
    tq, tk, hd = q.shape[-2], k.shape[-2], q.shape[-1]
    out = torch.zeros_like(q)
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            for i in range(tq):
                last = i + tk - tq  # keys 0..last are visible
                s = k[b, h, : last + 1] @ q[b, h, i] / math.sqrt(hd)
                g = torch.sigmoid(s)
                p = torch.stack([g[j:].sum() for j in range(last + 1)]).clamp(max=npos_max - 1)
                lo, hi = p.floor().long(), p.ceil().long()
                w = p - p.floor()
                pe = (1 - w)[:, None] * e[lo] + w[:, None] * e[hi]  # e[p_ij], interpolated vectors
                z = s + pe @ q[b, h, i]
                out[b, h, i] = torch.softmax(z, 0) @ v[b, h, : last + 1]
    return out


@pytest.mark.parametrize("tq,tk,npos_max", [(6, 6, 64), (4, 9, 3), (1, 7, 4)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cope_equals_the_loop_reference(tq, tk, npos_max, dtype):
    m = registry.build(ModelConfig(d_model=64, n_heads=4, n_layers=2, method="cope", method_options={"npos_max": npos_max}))
    with torch.no_grad():
        m.table.normal_(0, 0.5)
    m = m.to(dtype)
    q, k, v = qkv(tq, tk, seed=tk, dtype=dtype)
    pos = torch.arange(tk)
    got = m.attend(q, k, v, pos[tk - tq :], pos, 1)
    assert got.dtype == dtype
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.double(), reference(q, k, v, m.table[1], npos_max), atol=tol, rtol=tol)


def test_cope_rejects_a_bad_npos_max():
    with pytest.raises(ValueError, match="cope: npos_max must be an integer >= 2"):
        registry.build(ModelConfig(method="cope", method_options={"npos_max": 1}))

"""sandwich against its paper's definition: the inner product of sinusoidal position vectors,
shifted to 0 at distance 0 and divided by 8h/H, on hand-computed values and a float64 reference."""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from tests.helpers.attention import method, qkv, reference_attention


def sinusoid(p: torch.Tensor, dim: int) -> torch.Tensor:
    """(T, dim) float64 sinusoidal vectors [sin(p w_k), cos(p w_k)], w_k = 10000^(-2k/dim), k = 1..dim/2."""
    w = 10000.0 ** (-2.0 * torch.arange(1, dim // 2 + 1, dtype=torch.float64) / dim)
    a = p.double()[:, None] * w
    return torch.cat([a.sin(), a.cos()], -1)


def reference_bias(q_pos, k_pos, dim, n_heads):
    """(H, Tq, Tk) float64 (p_i . p_j - dim/2) / (8h/H), straight from the vectors."""
    inner = sinusoid(q_pos, dim) @ sinusoid(k_pos, dim).t() - dim / 2
    return torch.stack([inner / (8 * h / n_heads) for h in range(1, n_heads + 1)])


def test_sandwich_on_hand_computed_values():
    m = method("sandwich", dim=4)  # 4 heads: divisors 8h/4 = 2, 4, 6, 8
    # dim 4: w_1 = 10000^(-1/2) = 0.01, w_2 = 10000^(-1) = 1e-4. Distance 50 pi: angles pi/2 and
    # pi/200, so p_i . p_j = cos(pi/2) + cos(pi/200) = 0 + 0.99987663 and the bias of head h is
    # (0.99987663 - 2) / (2h) = -1.00012337 / (2h). Distance 0: p_i . p_i = 2 = dim/2, bias 0.
    q_pos = torch.tensor([50 * math.pi, 0.0], dtype=torch.float64)
    bias = m.bias(q_pos, torch.tensor([0.0], dtype=torch.float64), torch.float32)
    want = torch.tensor([[-1.00012337 / (2 * h)] for h in (1, 2, 3, 4)])
    torch.testing.assert_close(bias[:, 0], want, atol=1e-6, rtol=0)
    assert torch.equal(bias[:, 1], torch.zeros(4, 1))
    assert bias.dtype == torch.float32


def test_sandwich_with_eight_heads_divides_head_one_by_one_as_nemo():
    m = registry.build(ModelConfig(d_model=64, n_heads=8, method="sandwich"))
    pos = torch.arange(40)
    bias = m.bias(pos, pos, torch.float32)
    torch.testing.assert_close(bias, reference_bias(pos, pos, 8, 8).float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(bias[0], bias[7] * 8)  # 8h/H: 1 for head 1, 8 for head 8


def test_sandwich_bias_is_the_inner_product_of_sinusoids_and_decays_with_distance():
    m = method("sandwich")  # dim = head dim 16
    pos = torch.arange(64)
    bias = m.bias(pos, pos, torch.float32)
    torch.testing.assert_close(bias.double(), reference_bias(pos, pos, 16, 4), atol=1e-5, rtol=1e-5)
    # Distances 0..10 from the last query: 0, then decreasing (with d' = 16 the fastest of the 8
    # frequencies, 10000^(-1/8) = 0.32 rad per token, turns the sum back up near distance 11).
    row = bias[0, -1].flip(0)[:11]
    assert row[0] == 0 and bool((row[1:] < row[:-1]).all())


@pytest.mark.parametrize("tq,tk", [(9, 9), (600, 600), (4, 13), (1, 7)])
def test_sandwich_attention_equals_the_reference(tq, tk):
    m = method("sandwich")
    q, k, v = qkv(tq, tk, seed=tq)
    pos = torch.arange(tk)
    want = reference_attention(q, k, v, reference_bias(pos[tk - tq :], pos, 16, 4))
    state = m.prepare(pos[tk - tq :], pos, torch.float32)  # the plan a model forward takes
    torch.testing.assert_close(m.attend(q, k, v, pos[tk - tq :], pos, 0, state).double(), want, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(m.attend(q, k, v, pos[tk - tq :], pos, 0).double(), want, atol=2e-5, rtol=1e-4)


def test_sandwich_rejects_an_odd_dim():
    with pytest.raises(ValueError, match="sandwich: dim must be an even integer"):
        method("sandwich", dim=5)

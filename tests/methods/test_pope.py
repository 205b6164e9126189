"""PoPE against values computed by hand from its paper's equations (methods/pope.py)."""

import math

import pytest
import torch

from tests.helpers.attention import method
from tests.helpers.methods import encode, one_head


def test_pope_score_is_softplus_magnitudes_times_the_cosine_of_the_phase_difference():
    # hd 2, base 4: theta = [1, 1/2]; delta = [0, -pi/2]. q = [0, 1] at m = 3, k = [-1, 0] at n = 1:
    # score = sum_c sp(q_c) sp(k_c) cos(2 theta_c - delta_c) / sqrt 2, sp = softplus.
    m = one_head("pope", 2, base=4.0)
    with torch.no_grad():
        m.phase_bias.copy_(torch.tensor([[[0.0, -math.pi / 2]]]))
    pos = torch.tensor([1, 3])
    x = torch.tensor([[-1.0, 0.0], [0.0, 1.0]]).view(1, 1, 2, 2)  # row 0: the key at 1, row 1: the query at 3
    q, k = encode(m, x, pos)
    got = (q[0, 0, 1] @ k[0, 0, 0]) / math.sqrt(4)  # SDPA's scale for 2 hd channels

    def sp(z):
        return math.log1p(math.exp(z))

    want = (sp(0.0) * sp(-1.0) * math.cos(2.0) + sp(1.0) * sp(0.0) * math.cos(1.0 + math.pi / 2)) / math.sqrt(2)
    assert got.item() == pytest.approx(want, rel=1e-6)


def test_pope_phase_bias_is_clamped_to_minus_two_pi_to_zero():
    m = one_head("pope", 2, base=4.0)
    with torch.no_grad():
        m.phase_bias.copy_(torch.tensor([[[1.0, -7.0]]]))
    angle = m.key_angle(torch.zeros(1, 2, dtype=torch.float64), 1, 0)
    torch.testing.assert_close(angle[0, 0], torch.tensor([0.0, -2 * math.pi], dtype=torch.float64))


@pytest.mark.parametrize("name", ["pope"])
def test_bad_options_are_one_line(name):
    with pytest.raises(ValueError, match=f"{name}: base must be a number > 1"):
        method(name, base=1)

"""p-RoPE (methods/p_rope.py) against rotary on the highest fraction of frequencies, in float64."""

import pytest
import torch

from tests.helpers.attention import method, qkv, reference_attention, rotate_reference


@pytest.mark.parametrize("fraction, rotated", [(0.75, 6), (0.25, 2), (1.0, 8), (0.0, 0)])
def test_p_rope_rotates_the_highest_fraction_of_frequencies(fraction, rotated):
    m = method("p_rope", fraction=fraction)  # head_dim 16: 8 pairs
    assert m.rotated == rotated
    q, k, v = qkv(6, 10, d=16, seed=rotated)
    pos = torch.arange(10) + 37
    inv_freq = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    inv_freq[rotated:] = 0.0
    rq, rk = rotate_reference(q, pos[-6:], inv_freq), rotate_reference(k, pos, inv_freq)
    out = m.attend(q, k, v, pos[-6:], pos, 0)
    torch.testing.assert_close(out.double(), reference_attention(rq, rk, v), rtol=1e-5, atol=1e-5)


def test_p_rope_zero_is_nope_and_bad_fraction_is_one_line():
    m = method("p_rope", fraction=0.0)
    q, k, v = qkv(5, 5)
    pos = torch.arange(5) + 3
    torch.testing.assert_close(m.attend(q, k, v, pos, pos, 0).double(), reference_attention(q, k, v), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"p_rope: fraction must be a number in \[0, 1\]"):
        method("p_rope", fraction=1.5)

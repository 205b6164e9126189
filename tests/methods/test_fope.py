"""FoPE against values computed by hand from its paper's equations (methods/fope.py)."""

import math

import pytest
import torch

from tests.helpers.attention import method, qkv
from tests.helpers.methods import encode, one_head


def test_fope_pair_is_a_fourier_series_over_the_kept_frequencies():
    # hd 4, base 4: w = [1, 1/2]; train_len 16 keeps both (2 pi / 16 = 0.39). a[0, 1] = 0.5,
    # a[1, 0] = -0.25: S_0(n) = e^{in} + 0.5 e^{in/2}, S_1(n) = e^{in/2} - 0.25 e^{in}.
    m = one_head("fope", 4, base=4.0, train_len=16)
    with torch.no_grad():
        m.fourier_coef.copy_(torch.tensor([[[0.0, 0.5], [-0.25, 0.0]]]))
    pos = torch.tensor([2])
    q, _ = encode(m, torch.tensor([1.0, 0.0, 0.0, 0.0]).view(1, 1, 1, 4), pos)  # pair 0 = (channel 0, channel 2)
    torch.testing.assert_close(q[0, 0, 0], torch.tensor([math.cos(2) + 0.5 * math.cos(1), 0, math.sin(2) + 0.5 * math.sin(1), 0]))
    q, _ = encode(m, torch.tensor([0.0, 1.0, 0.0, 0.0]).view(1, 1, 1, 4), pos)  # pair 1 = (channel 1, channel 3)
    torch.testing.assert_close(
        q[0, 0, 0], torch.tensor([0, math.cos(1) - 0.25 * math.cos(2), 0, math.sin(1) - 0.25 * math.sin(2)])
    )


def test_fope_zeroes_the_frequencies_below_the_floor():
    # train_len 8: 2 pi / 8 = 0.785 > 1/2, so pair 1 has frequency 0 (left as it is) and leaves
    # pair 0's series: S_0(n) = e^{in}, whatever the coefficients.
    m = one_head("fope", 4, base=4.0, train_len=8)
    with torch.no_grad():
        m.fourier_coef.copy_(torch.tensor([[[0.0, 0.5], [-0.25, 0.0]]]))
    assert m.kept().tolist() == [True, False]
    pos = torch.tensor([3])
    q, _ = encode(m, torch.tensor([1.0, 2.0, 0.0, 5.0]).view(1, 1, 1, 4), pos)
    torch.testing.assert_close(q[0, 0, 0], torch.tensor([math.cos(3), 2.0, math.sin(3), 5.0]))


def test_fope_records_the_training_length_when_not_given():
    m = one_head("fope", 4, base=4.0)
    assert m.kept().tolist() == [True, True]  # before training: nothing zeroed
    m.train().prepare(torch.arange(8), torch.arange(8), torch.float32)
    assert int(m.trained_len) == 8 and m.kept().tolist() == [True, False]
    m.eval().prepare(torch.arange(32), torch.arange(32), torch.float32)
    assert int(m.trained_len) == 8  # evaluation never moves it


def test_fope_without_coefficients_and_floor_is_rotary():
    fope, rotary = method("fope", sigma=0.0), method("rotary")
    q, k, v = qkv(5, 9)
    pos = torch.arange(9)
    torch.testing.assert_close(fope.attend(q, k, v, pos[4:], pos, 1), rotary.attend(q, k, v, pos[4:], pos, 1))


@pytest.mark.parametrize("name", ["fope"])
def test_bad_options_are_one_line(name):
    with pytest.raises(ValueError, match=f"{name}: base must be a number > 1"):
        method(name, base=1)

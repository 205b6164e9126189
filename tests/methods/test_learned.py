"""learned absolute positions (methods/learned.py): the table added, interpolated and clamped or refused beyond its end."""

import pytest
import torch

from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from tests.helpers.attention import method


def test_learned_adds_table_rows_and_interpolates_float_positions():
    m = method("learned", max_positions=32)
    x = torch.randn(2, 5, 64)
    pos = torch.arange(3, 8)
    torch.testing.assert_close(m.embed(x, pos), x + m.weight[3:8][None])
    half = torch.tensor([0.0, 2.5, 7.25])
    expected = torch.stack([m.weight[0], 0.5 * (m.weight[2] + m.weight[3]), 0.75 * m.weight[7] + 0.25 * m.weight[8]])
    torch.testing.assert_close(m.table(half), expected)


def test_learned_clamps_beyond_the_table_by_default():
    m = method("learned", max_positions=8)
    out = m.table(torch.tensor([6, 7, 8, 100]))
    for row in out[1:]:
        torch.testing.assert_close(row, m.weight[7])
    torch.testing.assert_close(m.table(torch.tensor([9.5])), m.weight[7][None])


def test_learned_error_beyond_the_table_is_one_line():
    m = method("learned", max_positions=8, beyond="error")
    m.table(torch.arange(8))  # inside: fine
    with pytest.raises(ValueError, match=r"^learned: position 8 is beyond the table of 8 positions; allowed"):
        m.table(torch.arange(9))
    with pytest.raises(ValueError, match="beyond must be one of clamp, error"):
        method("learned", beyond="wrap")
    with pytest.raises(ValueError, match="max_positions must be a positive integer"):
        method("learned", max_positions=0)


def test_learned_table_starts_at_fairseq_scale():
    m = method("learned")
    assert m.weight.shape == (1024, 64)
    assert m.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)
    model = build_model(ModelConfig(d_model=64, n_heads=4, method="learned"))
    assert model.method.weight.std().item() == pytest.approx(64**-0.5, rel=0.05)  # not re-initialised

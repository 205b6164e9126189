"""Sinusoidal positions (methods/sinusoidal.py) against Vaswani et al.'s formula."""

import math

import pytest
import torch

from tests.helpers.methods import model_method


def test_sinusoidal_matches_vaswani_formula():
    s = model_method("sinusoidal", d_model=8, n_heads=2)
    pos = torch.tensor([0, 1, 7, 1000])
    pe = s.table(pos).double()
    for r, p in enumerate(pos.tolist()):
        for i in range(4):
            angle = p / 10000 ** (2 * i / 8)
            assert pe[r, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-5)
            assert pe[r, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-5)

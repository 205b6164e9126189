"""Flushing subnormals (every worker's default, issue 59) changes no measured quality: the values
it zeroes are below 1e-38, so the tiny model's evaluation loss on a fixed batch is the same within
1e-6 relative, for the methods whose far keys' probabilities are subnormal and for the floor.
tests/conftest.py puts this process's flush back after the test."""

import pytest
import torch

from posbench.core.alibi_math import alibi_slopes
from posbench.core.model import build_model, model_config
from posbench.engine.env import can_flush_subnormals
from posbench.engine.evaluate import evaluate

L = 512  # ALiBi's first head (slope 1/4) puts keys 350-410 back at exp(-87..-103): subnormal


def _loss(method: str, flush: bool) -> float:
    torch.set_flush_denormal(flush)
    torch.manual_seed(0)
    model = build_model(model_config("tiny", method))
    tokens = torch.randint(0, 256, (2 * L + 1,), generator=torch.Generator().manual_seed(1))
    return evaluate(model, tokens, L, batch_size=2).loss


@pytest.mark.skipif(not can_flush_subnormals(), reason="this CPU cannot flush subnormals (not x86 with SSE3)")
@pytest.mark.parametrize("method", ["alibi", "t5_bias", "kerple_log", "nope"])
def test_flushing_subnormals_keeps_the_evaluation_loss(method):
    assert _loss(method, True) == pytest.approx(_loss(method, False), rel=1e-6, abs=0)


@pytest.mark.skipif(not can_flush_subnormals(), reason="this CPU cannot flush subnormals (not x86 with SSE3)")
def test_alibis_far_keys_are_subnormal_unless_flushed():
    """What the loss test is about: softmax over ALiBi's first head's bias at L 512 (a query at the
    end, every key) holds subnormal probabilities, which the flush turns to zeros."""
    scores = -alibi_slopes(4)[0] * torch.arange(L - 1, -1, -1, dtype=torch.float32)  # (L,)
    tiny = torch.finfo(torch.float32).tiny
    torch.set_flush_denormal(False)
    p = torch.softmax(scores, -1)
    assert ((p > 0) & (p < tiny)).sum() > 10
    torch.set_flush_denormal(True)
    p = torch.softmax(scores, -1)
    assert ((p > 0) & (p < tiny)).sum() == 0 and (p == 0).sum() > 10

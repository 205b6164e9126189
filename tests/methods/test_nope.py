"""nope: plain causal attention, on a CPU by the faster path per length (posbench/core/causal.py):
a training step's gradients equal SDPA's, under multi-head and grouped-query attention."""

import pytest
import torch

from posbench.core import causal
from posbench.core.cpu_flash import CPU_FLASH_WITH_MASK
from posbench.core.method import ModelConfig, PositionMethod
from posbench.core.model import build_model, lm_loss


@pytest.mark.skipif(CPU_FLASH_WITH_MASK is None, reason="torch's CPU flash op takes no attn_mask")
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_nope_training_takes_the_blocked_backward_with_sdpas_gradients(monkeypatch, kv_heads):
    cfg = ModelConfig(vocab_size=64, n_layers=2, d_model=32, n_heads=4, n_kv_heads=kv_heads, method="nope")
    torch.manual_seed(0)
    model = build_model(cfg).double()
    x = torch.randint(0, 64, (2, 67), generator=torch.Generator().manual_seed(1))
    taken = []
    real = causal.causal_flash_attention
    monkeypatch.setattr(causal, "causal_flash_attention", lambda *a: taken.append(1) or real(*a))
    grads = {}
    for blocked in (True, False):
        monkeypatch.setattr(causal, "blocked_backward_pays", lambda length, b=blocked: b)
        model.zero_grad()
        lm_loss(model(x[:, :-1]), x[:, 1:]).backward()
        grads[blocked] = [p.grad.clone() for p in model.parameters()]
    assert len(taken) == cfg.n_layers  # every layer, only when the rule says so
    for a, b in zip(grads[True], grads[False]):
        torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-10)
    assert model.method.attn_backend("cpu", torch.float32) == causal.BACKEND
    assert model.method.attn_backend("cpu", torch.bfloat16) == "sdpa causal"


@pytest.mark.parametrize("name", ["nope", "sinusoidal", "learned"])
def test_every_method_keeping_the_default_attend_takes_nopes_path(name):
    method = build_model(ModelConfig(vocab_size=64, n_layers=1, d_model=32, n_heads=4, method=name)).method
    assert type(method).attend is PositionMethod.attend
    expected = causal.BACKEND if CPU_FLASH_WITH_MASK is not None else "sdpa causal"
    assert method.attn_backend("cpu", torch.float32) == expected

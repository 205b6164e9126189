"""T5's relative position bias (methods/t5_bias.py): the buckets of the published function, one
table for every layer, and its fast path (explicit attention with the bias gathered once per
forward) against the plain per-layer formulation: several seeds, odd lengths, float32 and
bfloat16, outputs and gradients."""

import importlib
import math

import pytest
import torch

from posbench.core import registry
from posbench.core.masked import causal_attention, causal_mask
from posbench.core.method import ModelConfig
from posbench.core.model import build_model, lm_loss
from tests.helpers.fast_paths import DTYPES, TOL, assert_same_gradients, fast_path_method, fast_path_qkv, float64_attention
from tests.helpers.methods import model_method


def test_t5_buckets_match_published_function():
    t5 = importlib.import_module(registry.get("t5_bias").__module__)
    d = torch.tensor([0, 1, 5, 15, 16, 17, 20, 31, 32, 45, 63, 64, 90, 127, 128, 500, 10_000])
    # Values of T5's _relative_position_bucket(-d, bidirectional=False, 32, 128), worked by hand:
    # d < 16 -> d; else 16 + floor(log(d / 16) / log(8) * 16), capped at 31.
    expected = [0, 1, 5, 15, 16, 16, 17, 21, 21, 23, 26, 26, 29, 31, 31, 31, 31]
    assert t5.relative_position_bucket(d).tolist() == expected
    for n in d.tolist():
        want = n if n < 16 else min(31, 16 + int(math.log(n / 16) / math.log(8) * 16))
        assert t5.relative_position_bucket(torch.tensor([n])).item() == want
    assert t5.relative_position_bucket(torch.tensor([-3])).item() == 0  # future keys
    assert t5.relative_position_bucket(torch.tensor([20.7])).item() == 17  # floats are floored


def test_t5_bias_table_shared_by_layers_and_unscaled():
    torch.manual_seed(0)
    m = model_method("t5_bias")
    assert m.table.weight.shape == (32, 4)
    with torch.no_grad():
        m.table.weight.normal_()
    b, h, t, d = 1, 4, 6, 16
    q, k, v = (torch.randn(b, h, t, d) for _ in range(3))
    pos = torch.arange(t)
    out0, out5 = m.attend(q, k, v, pos, pos, 0), m.attend(q, k, v, pos, pos, 5)
    torch.testing.assert_close(out0, out5)  # one table for every layer
    bias = m.table.weight[(pos[:, None] - pos[None, :]).clamp(min=0)].permute(2, 0, 1).double()
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d) + bias
    scores = scores.masked_fill(~causal_mask(t, t, "cpu"), float("-inf"))
    torch.testing.assert_close(out0.double(), torch.softmax(scores, -1) @ v.double(), rtol=1e-5, atol=1e-5)


# --- the fast path: the bias gathered once per forward ------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed, tq, tk", [(0, 7, 7), (1, 13, 13), (2, 33, 33), (3, 5, 19), (4, 1, 9)])
def test_t5_attend_equals_reference(seed, tq, tk, dtype):
    m = fast_path_method("t5_bias").to(dtype)
    with torch.no_grad():
        m.table.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    q, k, v = fast_path_qkv(seed, 2, 3, tq, tk, 32, dtype)
    pos = torch.arange(tk)
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    assert out.dtype == dtype and out.shape == q.shape
    # reference: the table gathered per (i, j) bucket, in float64
    w = m.table.weight
    bias = w[m.buckets(pos[-tq:], pos)].permute(2, 0, 1)
    ref = float64_attention(q, k, v, bias)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    assert_same_gradients(out, ref, (q, k, v, w), seed, dtype)


def _t5_model(seed, dtype):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=64, n_layers=3, d_model=96, n_heads=3, d_ff=128, method="t5_bias")
    model = build_model(cfg)
    with torch.no_grad():
        model.method.table.weight.normal_(0, 0.5)
    return model.to(dtype).train()


def _per_layer_reference(m):
    """The plain formulation: the bias gathered in every layer, masked, through SDPA."""

    def attend(q, k, v, q_pos, k_pos, layer, state=None):
        bias = m.table(m.buckets(q_pos, k_pos)).permute(2, 0, 1).to(q.dtype)
        return causal_attention(q, k, v, bias)

    return attend


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed, length", [(0, 9), (1, 17), (2, 31), (3, 133)])
def test_t5_bias_shared_across_layers_gives_the_per_layer_gradients(seed, length, dtype):
    idx = torch.randint(0, 64, (2, length + 1), generator=torch.Generator().manual_seed(seed))
    results = []
    for reference in (False, True):
        model = _t5_model(seed, dtype)
        if reference:
            model.method.attend = _per_layer_reference(model.method)
        logits = model(idx[:, :-1])
        lm_loss(logits, idx[:, 1:]).backward()
        results.append((logits.detach().double(), {n: p.grad.double() for n, p in model.named_parameters()}))
    (fast, fast_grads), (ref, ref_grads) = results
    torch.testing.assert_close(fast, ref, **TOL[dtype])
    for name, g in ref_grads.items():
        scale = max(1e-3, g.abs().max().item())
        torch.testing.assert_close(fast_grads[name] / scale, g / scale, **TOL[dtype], msg=name)


def test_t5_repeated_forwards_accumulate_and_never_reuse_a_freed_graph():
    model = _t5_model(0, torch.float32)
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    lm_loss(model(idx[:, :-1]), idx[:, 1:]).backward()
    once = model.method.table.weight.grad.clone()
    # a second forward and backward on the same positions tensors (gradient accumulation)
    lm_loss(model(idx[:, :-1]), idx[:, 1:]).backward()
    torch.testing.assert_close(model.method.table.weight.grad, 2 * once)
    # two forwards, then one backward through both
    model.zero_grad()
    (lm_loss(model(idx[:, :-1]), idx[:, 1:]) + lm_loss(model(idx[:, :-1]), idx[:, 1:])).backward()
    torch.testing.assert_close(model.method.table.weight.grad, 2 * once)
    # direct calls of attend after a model forward recompute their bias
    m = model.method
    q, k, v = fast_path_qkv(0, 1, 3, 11, 11, 32, torch.float32)
    pos = torch.arange(11)
    for layer in (1, 2, 1):
        m.attend(q, k, v, pos, pos, layer).sum().backward()


def test_t5_bias_follows_an_optimizer_step():
    model = _t5_model(0, torch.float32)
    opt = torch.optim.SGD(model.parameters(), lr=10.0)
    idx = torch.randint(0, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    for _ in range(2):
        logits = model(idx[:, :-1])
        ref_model = _t5_model(0, torch.float32)
        ref_model.load_state_dict(model.state_dict())
        ref_model.method.attend = _per_layer_reference(ref_model.method)
        torch.testing.assert_close(logits, ref_model(idx[:, :-1]), rtol=1e-5, atol=1e-5)
        lm_loss(logits, idx[:, 1:]).backward()
        opt.step()
        opt.zero_grad()

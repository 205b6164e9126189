"""The faster code paths of the built-in methods equal their plain reference computations.

Each fast path (T5's explicit attention with a bias gathered once per forward, rotary's fused
rotation) is compared with the straightforward formula on random inputs: several seeds, odd
lengths, float32 and bfloat16, outputs and gradients.
"""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.masked import causal_attention, causal_explicit_attention, causal_mask, mask_bias
from posbench.core.method import ModelConfig
from posbench.core.model import build_model, lm_loss

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def method(name, **cfg):
    return registry.build(ModelConfig(method=name, **{"d_model": 96, "n_heads": 3, **cfg}))


def qkv(seed, b, h, tq, tk, d, dtype):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d, generator=g)
    k, v = (torch.randn(b, h, tk, d, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_() for x in (q, k, v)]


def reference_attention(q, k, v, bias):
    """float64 softmax(q k^T / sqrt(d) + bias, causal) v; bias (H, Tq, Tk) or None."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    tq, tk = q.shape[-2], k.shape[-2]
    scores = scores.masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
    return torch.softmax(scores, -1) @ v


def grads(out, tensors, seed):
    g = torch.Generator().manual_seed(seed + 100)
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    return torch.autograd.grad((out.double() * upstream).sum(), tensors)


def assert_same_gradients(out, ref, tensors, seed, dtype):
    """The gradients of out and of its reference with respect to ``tensors`` agree, relative to
    the reference's largest entry (one random upstream gradient, the same for both)."""
    for a, b in zip(grads(out, tensors, seed), grads(ref, tensors, seed)):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double() / scale, b.double() / scale, **TOL[dtype])


# --- explicit attention over causal row blocks ---------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "seed, tq, tk", [(0, 128, 128), (1, 131, 131), (2, 255, 255), (3, 197, 230), (4, 300, 300), (5, 1, 150), (6, 63, 63)]
)
def test_causal_explicit_attention_equals_reference(seed, tq, tk, dtype):
    q, k, v = qkv(seed, 2, 3, tq, tk, 16, dtype)
    g = torch.Generator().manual_seed(seed + 50)
    bias = (torch.randn(3, tq, tk, generator=g) * 2).to(dtype).requires_grad_()
    out = causal_explicit_attention(q, k, v, mask_bias(bias))
    assert out.dtype == dtype and out.shape == q.shape
    ref = reference_attention(q, k, v, bias)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    assert_same_gradients(out, ref, (q, k, v, bias), seed, dtype)


# --- T5 bias -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("seed, tq, tk", [(0, 7, 7), (1, 13, 13), (2, 33, 33), (3, 5, 19), (4, 1, 9)])
def test_t5_attend_equals_reference(seed, tq, tk, dtype):
    m = method("t5_bias").to(dtype)
    with torch.no_grad():
        m.table.weight.normal_(0, 0.5, generator=torch.Generator().manual_seed(seed))
    q, k, v = qkv(seed, 2, 3, tq, tk, 32, dtype)
    pos = torch.arange(tk)
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    assert out.dtype == dtype and out.shape == q.shape
    # reference: the table gathered per (i, j) bucket, in float64
    w = m.table.weight
    bias = w[m.buckets(pos[-tq:], pos)].permute(2, 0, 1)
    ref = reference_attention(q, k, v, bias)
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
    q, k, v = qkv(0, 1, 3, 11, 11, 32, torch.float32)
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


# --- rotary ------------------------------------------------------------------------------------


def _rotate_reference(x, cos, sin):
    """The textbook rotation of channel pairs (i, i + hd/2), in float64."""
    x1, x2 = x.double().chunk(2, dim=-1)
    cos, sin = cos.double(), sin.double()
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "seed, tq, tk, floats", [(0, 7, 7, False), (1, 13, 13, False), (2, 33, 33, True), (3, 5, 19, False), (4, 1, 9, True)]
)
def test_rotary_attend_equals_reference(seed, tq, tk, floats, dtype):
    m = method("rotary").to(dtype)
    q, k, v = qkv(seed, 2, 3, tq, tk, 32, dtype)
    pos = torch.arange(tk) * (0.37 if floats else 1) + 3
    out = m.attend(q, k, v, pos[-tq:], pos, 0)
    assert out.dtype == dtype and out.shape == q.shape
    ang = pos.double()[:, None] * m.inv_freq.double()[None, :]
    cos, sin = ang.cos().to(dtype), ang.sin().to(dtype)  # the method rounds cos/sin to the compute dtype
    ref = reference_attention(_rotate_reference(q, cos[-tq:], sin[-tq:]), _rotate_reference(k, cos, sin), v, None)
    torch.testing.assert_close(out.double(), ref, **TOL[dtype])
    assert_same_gradients(out, ref, (q, k, v), seed, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=str)
def test_rotary_rotate_and_its_gradient_on_strided_inputs(dtype):
    rot = method("rotary", d_model=48, n_heads=3)
    g = torch.Generator().manual_seed(7)
    base = torch.randn(2, 11, 3 * 48, generator=g).to(dtype).requires_grad_()
    x = base[..., 48:96].view(2, 11, 3, 16).transpose(1, 2)  # a strided (B, H, T, hd) view, as in the model
    cos, sin = rot._cos_sin(torch.arange(11), dtype)
    out = rot.rotate(x, cos, sin)
    ref = _rotate_reference(x, cos, sin)
    tol = TOL.get(dtype, dict(rtol=1e-10, atol=1e-12))
    torch.testing.assert_close(out.double(), ref, **tol)
    (got,) = grads(out, (base,), 0)
    (want,) = grads(ref, (base,), 0)
    torch.testing.assert_close(got.double(), want.double(), **tol)
    assert got[..., :48].abs().max() == 0 and got[..., 96:].abs().max() == 0

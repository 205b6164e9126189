"""What the fast-path tests share: random inputs on a 96-wide, 3-head configuration, the float64
reference of causal attention with a bias, and gradients compared relative to the reference's
largest entry, in float32 and bfloat16."""

import math

import torch

from posbench.core import registry
from posbench.core.masked import causal_mask
from posbench.core.method import ModelConfig

DTYPES = [torch.float32, torch.bfloat16]
TOL = {torch.float32: dict(rtol=1e-4, atol=1e-5), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def fast_path_method(name, **cfg):
    """The method on ModelConfig(d_model=96, n_heads=3) with ``cfg``'s fields."""
    return registry.build(ModelConfig(method=name, **{"d_model": 96, "n_heads": 3, **cfg}))


def fast_path_qkv(seed, b, h, tq, tk, d, dtype):
    """q (b, h, tq, d), k and v (b, h, tk, d) in ``dtype``, each requiring its gradient."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, tq, d, generator=g)
    k, v = (torch.randn(b, h, tk, d, generator=g) for _ in range(2))
    return [x.to(dtype).requires_grad_() for x in (q, k, v)]


def float64_attention(q, k, v, bias):
    """float64 softmax(q k^T / sqrt(d) + bias, causal) v; bias (H, Tq, Tk) or None."""
    q, k, v = q.double(), k.double(), v.double()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    tq, tk = q.shape[-2], k.shape[-2]
    scores = scores.masked_fill(~causal_mask(tq, tk, "cpu"), float("-inf"))
    return torch.softmax(scores, -1) @ v


def grads(out, tensors, seed):
    """The gradients of ``out`` times one random upstream gradient (seeded) w.r.t. ``tensors``."""
    g = torch.Generator().manual_seed(seed + 100)
    upstream = torch.randn(out.shape, generator=g, dtype=torch.float64)
    return torch.autograd.grad((out.double() * upstream).sum(), tensors)


def assert_same_gradients(out, ref, tensors, seed, dtype):
    """The gradients of out and of its reference with respect to ``tensors`` agree, relative to
    the reference's largest entry (one random upstream gradient, the same for both)."""
    for a, b in zip(grads(out, tensors, seed), grads(ref, tensors, seed)):
        scale = max(1.0, b.abs().max().item())
        torch.testing.assert_close(a.double() / scale, b.double() / scale, **TOL[dtype])

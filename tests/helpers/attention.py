"""Float64 references the method tests compare with: causal attention, rotary's rotation, and a
method built on a small model configuration."""

import math

import torch

from posbench.core import registry
from posbench.core.method import ModelConfig


def method(name, **options):
    cfg = ModelConfig(d_model=64, n_heads=4, n_layers=4, method=name, method_options=options)
    return registry.build(cfg)


def reference_attention(q, k, v, bias=None):
    """softmax(q k^T / sqrt(d) + bias) v in float64, causal (bottom-right aligned)."""
    q, k, v = q.double(), k.double(), v.double()
    tq, tk = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if bias is not None:
        scores = scores + bias.double()
    i = torch.arange(tq)[:, None] + (tk - tq)
    j = torch.arange(tk)[None, :]
    scores = scores.masked_fill(j > i, float("-inf"))
    return torch.softmax(scores, -1) @ v


def qkv(tq, tk, h=4, d=16, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, tq, d, generator=g).to(dtype)
    k = torch.randn(2, h, tk, d, generator=g).to(dtype)
    v = torch.randn(2, h, tk, d, generator=g).to(dtype)
    return q, k, v


def rotate_reference(x, pos, inv_freq):
    """Rotary on channel pairs (i, i + d/2) by angle pos * inv_freq_i, float64."""
    ang = pos.double()[:, None] * inv_freq.double()[None, :]
    c, s = ang.cos(), ang.sin()
    x1, x2 = x.double().chunk(2, -1)
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

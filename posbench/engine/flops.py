"""The floating-point operations of training a ``TransformerLM`` (the ``flops`` budget and the
frontier's cost): the model's matmuls plus the position method's own work, counted per token.
How each term is counted: docs/tasks/budgets.md.

One multiply-add is 2 operations; training (forward and backward) counts 3 forwards, the
backward pass computing two matmuls per forward matmul (Kaplan et al. 2020, the "6N" rule).
Attention's scores and weighted sum count the full T x T square (dense kernels compute it,
masked or not). Layer norms, softmax, GELU and the optimizer are left out: they are elementwise
and small beside the matmuls at these widths.
"""

from __future__ import annotations

from posbench.core.config import ModelConfig

TRAIN_FACTOR = 3  # forward + backward (two matmuls per forward matmul)
ROTATION_FLOPS = 3  # a rotated element: two multiplies and an add (x cos + rotate_half(x) sin)


def matmul_flops(cfg: ModelConfig, seq_len: int) -> int:
    """Forward matmul operations of one sequence of ``seq_len`` tokens: per layer the qkv and
    output projections, the two feed-forward matmuls, the scores q k^T and the weighted sum of
    v; then the tied output projection onto the vocabulary."""
    T, D, F, V = seq_len, cfg.d_model, cfg.d_ff, cfg.vocab_size
    kv = cfg.kv_heads * cfg.head_dim  # grouped-query attention projects fewer keys and values
    per_layer = 2 * T * D * (D + 2 * kv) + 2 * T * D * D + 2 * 2 * T * D * F + 2 * 2 * T * T * D
    return cfg.n_layers * per_layer + 2 * T * D * V


def position_flops(method_cls: type, cfg: ModelConfig, seq_len: int) -> int:
    """Forward operations of the method's own position work on one sequence. A method class may
    say it itself with a ``position_flops(cfg, seq_len)`` classmethod; else it is read from the
    hooks the class overrides: an ``embed`` adds a (T, D) table once; ``encode_qk`` rotates q and
    k in every layer (3 operations an element); a bias method adds its (H, T, T) bias to the
    scores in every layer (``BiasMethod.position_flops``; building the bias, once a forward, is
    left out). A method that
    overrides only ``attend`` with its own kernel counts nothing beyond the matmuls."""
    own = getattr(method_cls, "position_flops", None)
    if own is not None:
        return int(own(cfg, seq_len))
    from posbench.core.method import PositionMethod

    T, D, n = seq_len, cfg.d_model, cfg.n_layers
    total = 0
    if method_cls.embed is not PositionMethod.embed:
        total += T * D
    if method_cls.encode_qk is not PositionMethod.encode_qk:
        total += n * 2 * ROTATION_FLOPS * T * D
    return total


def train_flops_per_step(method_cls: type, cfg: ModelConfig, seq_len: int, batch_size: int) -> int:
    """Training operations of one optimizer step on ``batch_size`` sequences of ``seq_len`` tokens."""
    return TRAIN_FACTOR * batch_size * (matmul_flops(cfg, seq_len) + position_flops(method_cls, cfg, seq_len))

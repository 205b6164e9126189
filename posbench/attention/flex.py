"""FlexAttention for a bias method on CUDA: the bias as a ``score_mod`` read from the method's
``BiasForm`` (slopes, a distance row, or the built bias read by index), causality and a sliding
window as a block mask; nothing of size L x L for slopes and distance rows (docs/attention-plans.md,
"FlexAttention"). Off CUDA it runs unfused and eager, forward only, as the CPU tests check."""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

# Fewer queries than this (a decode step, a short prompt): the masked bias is small, and a fused
# kernel launch buys nothing. FlexAttention's own block is 128 rows.
FLEX_MIN_ROWS = 128

ScoreMod = Callable[..., torch.Tensor]  # (score, b, h, q_idx, kv_idx) -> score


def flex_available(device) -> bool:
    """Whether a bias method's attention on ``device`` can take FlexAttention: a CUDA device and
    a torch that ships it (2.5 and later)."""
    if torch.device(device).type != "cuda":
        return False
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def linear_score_mod(slopes: torch.Tensor, q_pos: torch.Tensor, k_pos: torch.Tensor) -> ScoreMod:
    """ALiBi's ``-m_h (p_i - p_j)``: slopes (H,), positions (Tq,), (Tk,) in float32."""
    m, qp, kp = slopes.float(), q_pos.float(), k_pos.float()

    def score_mod(score, b, h, q_idx, kv_idx):
        return score - m[h] * (qp[q_idx] - kp[kv_idx])

    return score_mod


def distance_score_mod(row: torch.Tensor, tq: int) -> ScoreMod:
    """A bias of the distance alone, keys at consecutive positions and the queries the last ``tq``
    of them: ``row`` (H or 1, Tk), row[t] the bias at distance Tk - 1 - t (the last query's row)."""
    heads, tk = row.shape
    offset = tk - tq  # query i sits at key index i + offset

    def score_mod(score, b, h, q_idx, kv_idx):
        # a future key (masked by the block mask, yet scored inside a partial block) reads distance 0
        t = torch.clamp(tk - 1 - (q_idx + offset) + kv_idx, max=tk - 1)
        return score + row[h if heads > 1 else 0, t]

    return score_mod


def of_distance_score_mod(of_distance: Callable, tq: int, tk: int) -> ScoreMod:
    """A bias computed from the distance inside the score_mod (``BiasForm.of_distance``: T5's
    bucket, then one read of its (buckets, H) table), the queries the last ``tq`` of ``tk``
    consecutive keys: no row, no square, no per-score gather of a distance row."""
    offset = tk - tq

    def score_mod(score, b, h, q_idx, kv_idx):
        # a future key (masked by the block mask, yet scored inside a partial block) reads distance < 0
        return score + of_distance(q_idx + offset - kv_idx, h).to(score.dtype)

    return score_mod


def dense_score_mod(bias: torch.Tensor) -> ScoreMod:
    """Any bias: (H or 1, Tq or 1, Tk) read by index (a broadcast dimension reads its one entry)."""
    heads, rows, _ = bias.shape

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h if heads > 1 else 0, q_idx if rows > 1 else 0, kv_idx]

    return score_mod


def gate_score_mod(big_f: torch.Tensor, tq: int) -> ScoreMod:
    """A data-dependent bias F_i - F_j (FoX's forget gates): ``big_f`` (B, H, Tk) float32, the
    queries the last ``tq`` keys."""
    offset = big_f.shape[-1] - tq

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + (big_f[b, h, q_idx + offset] - big_f[b, h, kv_idx])

    return score_mod


@functools.lru_cache(maxsize=64)
def causal_block_mask(tq: int, tk: int, device: str, window: int | None = None):
    """Bottom-right aligned causality (query i sees keys j <= i + Tk - Tq; with a ``window`` only
    j > i + Tk - Tq - window) as a block mask, made once per shape, device and window: the blocks
    wholly outside the window are skipped."""
    from torch.nn.attention.flex_attention import create_block_mask

    offset = tk - tq

    def causal(b, h, q_idx, kv_idx):
        return q_idx + offset >= kv_idx

    if window is not None:

        def sliding(b, h, q_idx, kv_idx):
            return (q_idx + offset >= kv_idx) & (q_idx + offset - kv_idx < window)

        return create_block_mask(sliding, None, None, tq, tk, device=device)

    return create_block_mask(causal, None, None, tq, tk, device=device)


@functools.cache
def kernel(device_type: str) -> Callable:
    """``flex_attention`` compiled into one fused kernel on CUDA; eager (unfused) elsewhere."""
    from torch.nn.attention.flex_attention import flex_attention

    if device_type == "cuda":
        return torch.compile(flex_attention, dynamic=False)
    return flex_attention


def flex_attend(q, k, v, score_mod: ScoreMod, block_mask) -> torch.Tensor:
    """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd): attention with ``score_mod`` added
    to q . k / sqrt(hd), under ``block_mask`` (``causal_block_mask(Tq, Tk, device)``)."""
    return kernel(q.device.type)(q, k, v, score_mod=score_mod, block_mask=block_mask)

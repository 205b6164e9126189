"""Plain causal attention (nope's, rotary's) by the faster of two paths per length on a CPU.

SDPA's CPU flash kernel works in query blocks of 32, 64 or 256 rows (L < 192, < 768, from 768 on)
against key blocks of 512, and under ``is_causal`` it stops at the block holding a query block's
last key but computes that key block whole. Its backward, two thirds of a training step's
attention, so scores ``sdpa_square_share(L)`` of the L x L square: all of it from L 193 to 767,
75% at 1024, 62.5% at 2048, where the causal half is needed. The blocked backward
(``posbench.core.key_bias``, query blocks of 64 against only the keys they see) scores about
half, with the cost of its own plumbing (an ``exp2`` pass, a few copies, a Python loop).

One layer's attention forward and backward (4 heads of 32, B x L = 2048, one thread, this thread's
CPU time, 15 interleaved repeats on a shared AMD EPYC; the median ratio to SDPA with its range):
L 256 1.08 [0.95-1.28], 512 0.85 [0.77-0.96], 1024 0.92 [0.87-0.99], 2048 1.01 [0.98-1.07]. Hence
the rule: the blocked backward where SDPA's share is at least ``MIN_SHARE`` and L at least
``MIN_LENGTH``; SDPA everywhere else (and for every call that is not a CPU training forward of
L queries against L keys in float32 or float64, or is compiled, or has a sliding window, or runs
under a torch function mode that reads SDPA's calls, as the sink modifier does: the sink's own
flash path then takes the same rule, ``posbench.attention.lse_sink``).
The forward is SDPA's own flash op either way, so outputs keep their bits; gradients change
within float32 rounding where the blocked backward is taken.
"""

from __future__ import annotations

import torch
from torch.overrides import _get_current_function_mode_stack

from posbench.core.cpu_flash import flash_here
from posbench.core.key_bias import causal_flash_attention
from posbench.core.masked import causal_attention, windowed

MIN_SHARE = 0.75  # the blocked backward where SDPA's scores cover at least this much of the square
MIN_LENGTH = 512  # ... and L at least this (at 256 its plumbing cost more than the half it saved)
BACKEND = "sdpa causal (backward by 64-query blocks where SDPA's covers >= 75% of the square, L >= 512)"


def sdpa_square_share(length: int) -> float:
    """The share of the L x L square SDPA's CPU flash kernel scores under ``is_causal``
    (L queries, L keys): its query blocks (32, 64 or 256 rows) each against whole key blocks of 512
    up to the one holding the block's last key."""
    q_split = 256 if length >= 768 else 64 if length >= 192 else 32
    kv_split = min(512, length)
    scored = 0
    for m in range(0, length, q_split):
        rows = min(q_split, length - m)
        last = min(m + rows, length)  # keys 0 .. last - 1 are seen by the block
        scored += rows * sum(min(kv_split, length - n) for n in range(0, last, kv_split))
    return scored / (length * length)


def blocked_backward_pays(length: int) -> bool:
    """Whether L queries against L keys take the blocked backward (the rule above)."""
    return length >= MIN_LENGTH and sdpa_square_share(length) >= MIN_SHARE


def backend(device, dtype: torch.dtype) -> str:
    """The ``attn_backend`` of a method attending by ``causal_sdpa``."""
    if flash_here(device) and dtype in (torch.float32, torch.float64):
        return BACKEND
    return "sdpa causal"


def blocked_allowed(q, k, v, window: int | None = None) -> bool:
    """Whether a causal call may take the blocked backward at all: on a CPU with the flash op, a
    training forward (autograd wants a gradient) of Tq == Tk in float32 or float64, no window
    hiding a key, not compiled (``takes_blocked`` asks it for the sink's flash path)."""
    tq, tk = q.shape[-2], k.shape[-2]
    return (
        tq == tk
        and not windowed(tk, window)
        and q.dtype in (torch.float32, torch.float64)
        and flash_here(q.device)
        and torch.is_grad_enabled()
        and any(t.requires_grad for t in (q, k, v))
        and not torch.compiler.is_compiling()
    )


def blocked_here(q, k, v, window: int | None = None) -> bool:
    """``blocked_allowed``, and no torch function mode reading SDPA's calls (the sink's, which
    takes the rule itself on its own flash path): where a method's attention may skip SDPA."""
    return blocked_allowed(q, k, v, window) and not _get_current_function_mode_stack()


def takes_blocked(q, k, v, window: int | None = None, sink_path: bool = False) -> bool:
    """The rule itself: whether this causal call takes the blocked backward, ``blocked_here`` (or,
    on the sink's own flash path under its mode, ``blocked_allowed``) and ``blocked_backward_pays(L)``.
    Every route that can take it (plain causal SDPA, ALiBi's linear plan, the sink) asks this."""
    allowed = blocked_allowed(q, k, v, window) if sink_path else blocked_here(q, k, v, window)
    return allowed and blocked_backward_pays(q.shape[-2])


def causal_sdpa(q, k, v, window: int | None = None) -> torch.Tensor:
    """``posbench.core.masked.causal_attention(q, k, v, window=window)``, the same values, by the
    faster path: SDPA's flash forward and the blocked backward where ``takes_blocked``; else SDPA."""
    if takes_blocked(q, k, v, window):
        return causal_flash_attention(q, k, v)
    return causal_attention(q, k, v, window=window)

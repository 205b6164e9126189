"""PyTorch's private CPU flash-attention op, looked up in this one place.

Public SDPA refuses a mask beside ``is_causal=True``; this op (torch 2.3 on) applies both: causal
blocks are skipped and the mask is read with stride 0 along broadcast dimensions. Tests set
``CPU_FLASH_WITH_MASK`` to None to take the plain-ops paths every other device takes.
"""

from __future__ import annotations

import torch


def _cpu_flash_with_mask():
    """The op when it takes an ``attn_mask`` beside ``is_causal``, else None."""
    try:
        op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    except (AttributeError, RuntimeError):
        return None
    return op if "attn_mask" in str(op.default._schema) else None


CPU_FLASH_WITH_MASK = _cpu_flash_with_mask()


def flash_here(device) -> bool:
    """Whether attention on ``device`` goes through ``CPU_FLASH_WITH_MASK``: a CPU, with the op."""
    return CPU_FLASH_WITH_MASK is not None and torch.device(device).type == "cpu"


def flash_attention(q, k, v, causal: bool, mask: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The op: (softmax(scale q k^T + mask) v, its log-sum-exp per row); ``mask`` may broadcast."""
    return CPU_FLASH_WITH_MASK(q, k, v, 0.0, causal, attn_mask=mask, scale=scale)


def flash_attention_backward(grad, q, k, v, out, lse, how: tuple) -> tuple[torch.Tensor, ...]:
    """The op's backward: (dq, dk, dv) of ``flash_attention`` given the output's gradient, the
    output and its log-sum-exp (``posbench.attention.lse_sink`` hands it a rescaled pair); ``how``
    is ``flash_attention``'s (causal, mask, scale)."""
    causal, mask, scale = how
    return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad, q, k, v, out, lse, 0.0, causal, attn_mask=mask, scale=scale
    )

"""What the attention modifiers (``METHOD+MODIFIER``: methods/qknorm.py, ssmax.py, sink.py, gate.py)
share: the composed class's constructor signature, the state that marks q and k as already
encoded, and the softmax sink folded into scaled dot-product attention. A modifier calls the hooks
of the method beneath it with ``posbench.core.method.base_hook``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from posbench.attention.lse_sink import flash_sink_sdpa


def composed_signature(base: type, init, *extra: inspect.Parameter) -> None:
    """Give the composed ``init`` the base constructor's options and ``extra``: what a suite's
    ``method_options`` are checked against."""
    sig = inspect.signature(base.__init__)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    init.__signature__ = sig.replace(parameters=params + list(extra))


def keyword(name: str, default) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)


@dataclass(frozen=True)
class Encoded:
    """A model forward's state: the base method's, marking q and k as encoded by ``encode_qk``
    (``attend`` with ``state=None`` gets raw ones, so a modifier that changes raw q and k knows
    whether it already did, also for a base whose own state is None)."""

    inner: Any


def inner_state(state):
    return state.inner if isinstance(state, Encoded) else state


def last_rows_flat(x: torch.Tensor, tq: int, kv_heads: int) -> torch.Tensor:
    """The last ``tq`` rows of values or keys x (B, Hkv or H, T, hd), every key head's vector side
    by side: (B, Tq, Hkv * hd). Under grouped-query attention x may come expanded to the H query
    heads (key head h // G copied G times): one copy of each is kept."""
    if x.shape[1] != kv_heads:
        x = x[:, :: x.shape[1] // kv_heads]
    b, h, t, hd = x.shape
    return x[:, :, t - tq :].transpose(1, 2).reshape(b, tq, h * hd)


class SoftmaxSink(TorchFunctionMode):
    """Within the block, every ``F.scaled_dot_product_attention(q, k, v, ...)`` also sees one more
    key whose score is ``logits[h]`` for query head h and whose value is 0: softmax's denominator
    gains exp(s_h) (a learned attention sink, gpt-oss), the weights of the real keys are otherwise
    the base method's. On a CPU with the flash op the sink comes from the attention's log-sum-exp
    (``posbench.attention.lse_sink``), elsewhere as one more key (``sdpa_with_sink``, the
    reference). ``calls`` counts the attention calls it changed."""

    def __init__(self, logits: torch.Tensor):  # (H,)
        super().__init__()
        self.logits = logits
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        self.calls += 1
        q, k, v, *rest = args
        fast = flash_sink_sdpa(q, k, v, self.logits, sdpa_options(*rest, **kwargs))  # None: not here
        return fast if fast is not None else sdpa_with_sink(*args, sink=self.logits, **kwargs)


def sdpa_options(attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False) -> dict:
    """SDPA's options after q, k, v, given positionally or by name, with SDPA's defaults."""
    return dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


def sdpa_with_sink(q, k, v, *args, sink, **kwargs):
    """SDPA over the keys and a sink key (zero vector, zero value) whose score is sink[h]:
    q (B, H, Tq, d), k (B, Hk, Tk, d), v (B, Hk, Tk, dv), sink (H,); ``args`` and ``kwargs`` SDPA's
    other options as its caller gave them (``sdpa_options``); is_causal as SDPA's (top-left)."""
    options = sdpa_options(*args, **kwargs)
    attn_mask, is_causal = options["attn_mask"], options["is_causal"]
    tq, tk, h = q.shape[-2], k.shape[-2], q.shape[-3]
    if sink.shape != (h,):
        raise ValueError(f"sink: attention with {h} query heads, {sink.shape[0]} sink logits; allowed: one per head")
    if is_causal:
        attn_mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).tril()
    if attn_mask is None:
        mask = q.new_zeros(1, 1, tq, tk)
    elif attn_mask.dtype == torch.bool:
        mask = torch.zeros(attn_mask.shape, dtype=q.dtype, device=q.device).masked_fill(~attn_mask, float("-inf"))
    else:
        mask = attn_mask.to(q.dtype)
    while mask.dim() < 4:
        mask = mask[None]
    lead = (mask.shape[0], max(mask.shape[1], h))
    sink_col = sink.to(q.dtype).view(1, h, 1, 1).expand(*lead, tq, 1)
    mask = torch.cat([mask.expand(*lead, tq, tk), sink_col], -1)  # (B or 1, H, Tq, Tk + 1)
    k = torch.cat([k, k.new_zeros(*k.shape[:-2], 1, k.shape[-1])], -2)
    v = torch.cat([v, v.new_zeros(*v.shape[:-2], 1, v.shape[-1])], -2)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, dropout_p=options["dropout_p"], scale=options["scale"], enable_gqa=options["enable_gqa"]
    )

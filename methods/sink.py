"""A learned attention sink per head (OpenAI's gpt-oss, 2025; Xiao et al. 2024 "Efficient
Streaming Language Models with Attention Sinks" found models make one of their own). Composed by
name, ``METHOD+sink``, after ssmax and qknorm and before gate (docs/methods.md, "Modifiers").

Each layer and query head h has a logit s_h that joins the softmax's denominator and nothing else:

    o_i = sum_j exp(z_ij) v_j / (exp(s_h) + sum_j exp(z_ij))

with z_ij METHOD's scores, so a head may attend to nothing (its weights sum to less than 1).
``sink_init`` (default 0) is every s_h at start. The sink joins every scaled_dot_product_attention
call METHOD's attend makes (``posbench.attention.modifiers.SoftmaxSink``). On a CPU whose torch has
the flash op it comes from the attention's log-sum-exp, o * sigmoid(lse - s_h), exact and on the
flash kernel (``posbench.attention.lse_sink``, its own backward: plain causal attention's rule,
the blocked GEMM backward where SDPA's would score >= 75% of the square and L >= 512); elsewhere, and with dropout or a
mask that needs a gradient, it is one more key of score s_h and value 0 (``sdpa_with_sink``, the
reference the fast path is tested against; FlexAttention's ``return_lse`` on CUDA is not wired in).
METHOD's attention must go through SDPA with its true scores, as nope, rotary and its scalings,
p_rope, xpos and pope do; a path that does not (a fused Triton kernel, an explicit float32 path)
is one clear error, not a silent no-op, and a method whose
attention drops a per-query constant from the scores (``softmax_shift``: fox, the bias methods) is
unavailable with the reason.
"""

import math

import torch
from torch import nn

from posbench.attention.lse_sink import DTYPES as FLASH_SINK_DTYPES
from posbench.attention.modifiers import SoftmaxSink, composed_signature, keyword
from posbench.core.cpu_flash import flash_here
from posbench.core.method import base_hook
from posbench.core.registry import register_modifier


@register_modifier
class Sink:
    name = "sink"
    place = 30  # METHOD+ssmax+qknorm+sink+gate
    acts_on = "probabilities"  # the sink takes its share of the softmax: P sums to less than 1

    @staticmethod
    def compose(base: type) -> type:
        """``base`` with a learned sink logit per layer and head: ``<base.name>+sink``."""
        base_attend = base_hook(base, "attend")

        def __init__(self, cfg, *args, sink_init: float = 0.0, **options):
            base.__init__(self, cfg, *args, **options)
            if not (isinstance(sink_init, (int, float)) and math.isfinite(sink_init)):
                raise ValueError(f"{self.name}: sink_init must be a finite number, got {sink_init!r}")
            self.sink_logit = nn.Parameter(torch.full((cfg.n_layers, cfg.n_heads), float(sink_init)))  # (L, H)

        composed_signature(base, __init__, keyword("sink_init", 0.0))

        # PositionMethod.attend's signature, state included: it is passed on to the base's attend
        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):  # noqa: PLR0913
            with SoftmaxSink(self.sink_logit[layer]) as sink:
                o = base_attend(self, q, k, v, q_pos, k_pos, layer, state=state)
            if not sink.calls:
                raise ValueError(
                    f"{self.name}: {base.name}'s attention on {q.device.type} in {q.dtype} does not go through "
                    "scaled_dot_product_attention, where the sink is added; allowed: a METHOD+sink whose attention "
                    "does (nope, rotary, p_rope, xpos)"
                )
            return o

        def unavailable(cls, device, dtype):
            if base.softmax_shift:
                return (
                    f"{base.name}'s attention drops a per-query constant from its scores (exact for softmax "
                    "alone), which would move the weight of a sink"
                )
            return base.unavailable(device, dtype)

        def attn_backend(self, device, dtype) -> str:
            # the base's text stands: under the sink's mode its causal calls reach the sink's
            # flash path, which takes the same rule for the backward (posbench.attention.lse_sink)
            text = base.attn_backend(self, device, dtype)
            if flash_here(device) and dtype in FLASH_SINK_DTYPES:
                return text + " + sink from the flash log-sum-exp"
            return text + " + sink key (float mask)"

        body = {
            "name": f"{base.name}+sink",
            "__init__": __init__,
            "attend": attend,
            "unavailable": classmethod(unavailable),
            "attn_backend": attn_backend,
            "__module__": base.__module__,
            "__doc__": f"{base.name} with a learned softmax sink (methods/sink.py).",
        }
        return type(f"{base.__name__}Sink", (base,), body)

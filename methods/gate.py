"""The sigmoid output gate of gated attention (Qiu et al. 2025, "Gated Attention for Large
Language Models: Non-linearity, Sparsity, and Attention-Sink-Free", NeurIPS; Qwen3-Next), one gate
per head and token (the paper's head-wise variant). Composed by name, ``METHOD+gate``, last of the
modifiers (docs/methods.md, "Modifiers").

    o_{i,h} <- sigmoid(w_{l,h} . x'_i + b_{l,h}) * o_{i,h}

where o is METHOD's attention output. The paper's gate reads the layer's normed input LN(x_i); the
method interface hands a layer q, k and v, so the gate reads x'_i, the value vectors of token i of
every key head (Hkv x hd values), which no position method changes: v_i = W_v LN(x_i) + b_v is a
linear map of the normed input, the same family of gates wherever W_v is invertible (as fox's gate
reads the raw keys). A decode step finds its token's values at the end of the KV cache.
``out_gate_bias`` (default 0: every gate 0.5 at start) is b at start; w starts at 0.02-scale noise.
"""

import torch
from torch import nn

from posbench.attention.modifiers import composed_signature, keyword, last_rows_flat
from posbench.core.method import base_hook
from posbench.core.registry import register_modifier


@register_modifier
class OutputGate:
    name = "gate"
    place = 40  # METHOD+ssmax+qknorm+sink+gate
    acts_on = "output"  # it scales P v by a gate of the values, after P

    @staticmethod
    def compose(base: type) -> type:
        """``base`` with a sigmoid output gate per layer, head and token: ``<base.name>+gate``."""
        base_attend = base_hook(base, "attend")

        def __init__(self, cfg, *args, out_gate_bias: float = 0.0, **options):
            base.__init__(self, cfg, *args, **options)
            if not isinstance(out_gate_bias, (int, float)) or isinstance(out_gate_bias, bool):
                raise ValueError(f"{self.name}: out_gate_bias must be a number, got {out_gate_bias!r}")
            self.out_gate_w = nn.Parameter(torch.randn(cfg.n_layers, cfg.n_heads, cfg.kv_heads * cfg.head_dim) * 0.02)
            self.out_gate_b = nn.Parameter(torch.full((cfg.n_layers, cfg.n_heads), float(out_gate_bias)))

        composed_signature(base, __init__, keyword("out_gate_bias", 0.0))

        def output_gate(self, v, tq: int, layer: int) -> torch.Tensor:
            """(B, H, Tq, 1) float32: each query's gate per head, from its own values."""
            x = last_rows_flat(v, tq, self.cfg.kv_heads).float()  # (B, Tq, Hkv * hd)
            logits = x @ self.out_gate_w[layer].float().t() + self.out_gate_b[layer].float()  # (B, Tq, H)
            return torch.sigmoid(logits).transpose(1, 2)[..., None]

        # PositionMethod.attend's signature, state included: it is passed on to the base's attend
        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):  # noqa: PLR0913
            o = base_attend(self, q, k, v, q_pos, k_pos, layer, state=state)  # (B, H, Tq, hd)
            return o * output_gate(self, v, q.shape[-2], layer).to(o.dtype)

        def attn_backend(self, device, dtype) -> str:
            return base.attn_backend(self, device, dtype) + " + output gate"

        body = {
            "name": f"{base.name}+gate",
            "__init__": __init__,
            "attend": attend,
            "attn_backend": attn_backend,
            "__module__": base.__module__,
            "__doc__": f"{base.name} with a sigmoid output gate per head (methods/gate.py).",
        }
        return type(f"{base.__name__}Gate", (base,), body)

"""The sigmoid output gate of gated attention (Qiu et al. 2025, "Gated Attention for Large
Language Models: Non-linearity, Sparsity, and Attention-Sink-Free", NeurIPS; Qwen3-Next). Composed
by name, ``METHOD+gate``, last of the modifiers (docs/methods.md, "Modifiers").

    gate: headwise     o_{i,h}   <- sigmoid(w_{l,h} . x'_i + b_{l,h}) * o_{i,h}       (one gate per head)
    gate: elementwise  o_{i,h,c} <- sigmoid(w_{l,h,c} . x'_i + b_{l,h,c}) * o_{i,h,c} (one per channel)

where o is METHOD's attention output. The paper's best variant, and the one Qwen3-Next ships (its
q_proj gives a second head_dim-wide slice per head, the gate), is element-wise; ``headwise`` stays
the default here so that the runs made with the gate keep their results and run ids (``gate:
elementwise`` is the authors' form, as far as the interface allows: see below). The paper's gate reads the layer's normed input LN(x_i); the
method interface hands a layer q, k and v, so the gate reads x'_i, the value vectors of token i of
every key head (Hkv x hd values), which no position method changes: v_i = W_v LN(x_i) + b_v is a
linear map of the normed input, the same family of gates wherever W_v is invertible (as fox's gate
reads the raw keys). A decode step finds its token's values at the end of the KV cache.
There is no ``gate_input: input`` option: a position method's hooks are handed q, k and v, never
the layer input, and of those only v is unchanged by every method beneath the gate.
``out_gate_bias`` (default 0: every gate 0.5 at start) is b at start; w starts at 0.02-scale noise.
"""

import torch
from torch import nn

from posbench.attention.modifiers import composed_signature, keyword, last_rows_flat
from posbench.core.method import base_hook
from posbench.core.registry import register_modifier

GATES = ("headwise", "elementwise")


@register_modifier
class OutputGate:
    name = "gate"
    place = 40  # METHOD+ssmax+qknorm+sink+gate
    acts_on = "output"  # it scales P v by a gate of the values, after P

    @staticmethod
    def compose(base: type) -> type:
        """``base`` with a sigmoid output gate per layer, head and token: ``<base.name>+gate``."""
        base_attend = base_hook(base, "attend")

        def __init__(self, cfg, *args, out_gate_bias: float = 0.0, gate: str = "headwise", **options):
            base.__init__(self, cfg, *args, **options)
            if not isinstance(out_gate_bias, (int, float)) or isinstance(out_gate_bias, bool):
                raise ValueError(f"{self.name}: out_gate_bias must be a number, got {out_gate_bias!r}")
            if gate not in GATES:
                raise ValueError(f"{self.name}: gate must be one of {', '.join(GATES)}, got {gate!r}")
            self.gate = gate
            # headwise: one gate per head (H); elementwise: one per head and channel (H * hd)
            gates = cfg.n_heads * (cfg.head_dim if gate == "elementwise" else 1)
            self.out_gate_w = nn.Parameter(torch.randn(cfg.n_layers, gates, cfg.kv_heads * cfg.head_dim) * 0.02)
            self.out_gate_b = nn.Parameter(torch.full((cfg.n_layers, gates), float(out_gate_bias)))

        composed_signature(base, __init__, keyword("out_gate_bias", 0.0), keyword("gate", "headwise"))

        def output_gate(self, v, tq: int, layer: int) -> torch.Tensor:
            """(B, H, Tq, 1) (headwise) or (B, H, Tq, hd) (elementwise), float32 (float64 for float64
            values): each query's gates, from its own values."""
            cdt = torch.float64 if v.dtype == torch.float64 else torch.float32
            x = last_rows_flat(v, tq, self.cfg.kv_heads).to(cdt)  # (B, Tq, Hkv * hd)
            logits = x @ self.out_gate_w[layer].to(cdt).t() + self.out_gate_b[layer].to(cdt)  # (B, Tq, gates)
            b, h = x.shape[0], self.cfg.n_heads
            return torch.sigmoid(logits).view(b, tq, h, -1).transpose(1, 2)  # (B, H, Tq, 1 or hd)

        # PositionMethod.attend's signature, state included: it is passed on to the base's attend
        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):  # noqa: PLR0913
            o = base_attend(self, q, k, v, q_pos, k_pos, layer, state=state)  # (B, H, Tq, hd)
            return o * output_gate(self, v, q.shape[-2], layer).to(o.dtype)

        def attn_backend(self, device, dtype) -> str:
            return (
                base.attn_backend(self, device, dtype)
                + " + output gate"
                + (" (elementwise)" if self.gate == "elementwise" else "")
            )

        body = {
            "name": f"{base.name}+gate",
            "__init__": __init__,
            "attend": attend,
            "attn_backend": attn_backend,
            "__module__": base.__module__,
            "__doc__": f"{base.name} with a sigmoid output gate per head (methods/gate.py).",
        }
        return type(f"{base.__name__}Gate", (base,), body)

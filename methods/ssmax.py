"""Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for Attention"), a modifier any
method takes by a composed name: ``rotary+ssmax``, ``alibi+ssmax``, ``nope+ssmax``.

SSMax replaces softmax_j(z_ij) by softmax_j(s log(n_i) z_ij): n_i is the number of keys query i
sees (bottom-right aligned: Tk - Tq + i + 1, so a decode step at position t has n = t + 1; at most
the layer's sliding window) and s a
learned scale per layer and head. As the paper implements it (its section 2: "multiplying the
query by s log n"), METHOD+ssmax multiplies each query q_i by s_{l,h} log(n_i) and lets METHOD attend:

    z_ij = (s_{l,h} log n_i) q_i . k_j / sqrt(hd)        for nope, rotary and the other
                                                          methods whose logits are q . k alone;
    z_ij = (s_{l,h} log n_i) q_i . k_j / sqrt(hd) + b_ij  for a method that adds a bias b (alibi,
                                                          t5_bias, fox, sandwich): the bias is not scaled.

(For cope, the scaled query also enters its gates.) ``s_init`` (default 0.43, the value of the
paper's Figure 1) is every s at start. The composed method takes METHOD's options and ``s_init``.
"""

import inspect
import math

import torch
from torch import nn

from posbench.core.registry import register_modifier

S_INIT = 0.43


def log_key_counts(tq: int, tk: int, device, window: int | None = None) -> torch.Tensor:
    """(Tq,) float32 log n_i, n_i = Tk - Tq + i + 1 (at most ``window``): the keys query i of a
    bottom-right aligned causal chunk sees."""
    counts = torch.arange(tk - tq + 1, tk + 1, device=device, dtype=torch.float32)
    return (counts if window is None else counts.clamp(max=window)).log()


@register_modifier
class ScalableSoftmax:
    name = "ssmax"
    place = 10  # METHOD+ssmax+qknorm+sink+gate: the innermost, so it scales the normalized queries
    acts_on = "probabilities"  # the scaled queries change P (posbench.core.registry.modifier_acts_on)

    @staticmethod
    def compose(base: type) -> type:
        """``base`` with SSMax: a subclass named ``<base.name>+ssmax``."""
        base_init = inspect.signature(base.__init__)
        base_attend = inspect.signature(base.attend).parameters
        attend_takes_state = "state" in base_attend or len(base_attend) >= 8  # self + 7

        def __init__(self, cfg, *args, s_init: float = S_INIT, **options):
            base.__init__(self, cfg, *args, **options)
            if not (isinstance(s_init, (int, float)) and math.isfinite(s_init)):
                raise ValueError(f"{self.name}: s_init must be a finite number, got {s_init!r}")
            self.ssmax_s = nn.Parameter(torch.full((cfg.n_layers, cfg.n_heads), float(s_init)))  # (L, H)

        # The constructor's options, as a suite's method_options checks them: METHOD's and s_init.
        params = [p for p in base_init.parameters.values() if p.kind is not p.VAR_KEYWORD]
        s_param = inspect.Parameter("s_init", inspect.Parameter.KEYWORD_ONLY, default=S_INIT)
        __init__.__signature__ = base_init.replace(parameters=params + [s_param])

        # PositionMethod.attend's signature, state included: it is passed on to the base's attend
        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):  # noqa: PLR0913
            scale = self.ssmax_s[layer].float()[:, None] * log_key_counts(q.shape[-2], k.shape[-2], q.device, self.window(layer))
            q = q * scale.to(q.dtype)[None, :, :, None]  # (B, H, Tq, hd) * (1, H, Tq, 1)
            if attend_takes_state:
                return base.attend(self, q, k, v, q_pos, k_pos, layer, state)
            return base.attend(self, q, k, v, q_pos, k_pos, layer)

        def attn_backend(self, device, dtype) -> str:
            return base.attn_backend(self, device, dtype) + " + ssmax query scale"

        body = {
            "name": f"{base.name}+ssmax",
            "__init__": __init__,
            "attend": attend,
            "attn_backend": attn_backend,
            "__module__": base.__module__,
            "__doc__": f"{base.name} with Scalable-Softmax (methods/ssmax.py).",
        }
        return type(f"{base.__name__}SSMax", (base,), body)

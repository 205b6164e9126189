"""QK-norm: RMSNorm on each head's query and key before the position method sees them (Henry et
al. 2020, "Query-Key Normalization for Transformers"; OLMo 2, Gemma 3; the RNoPE-SWA study of
Cohere, Yang et al. 2025, arXiv 2501.18795, analyses it beside RoPE and NoPE). Composed by name,
``METHOD+qknorm``, after ssmax and before sink and gate (docs/methods.md, "Modifiers").

    q_h <- g_q * q_h / sqrt(mean(q_h^2) + eps),   k_h <- g_k * k_h / sqrt(mean(k_h^2) + eps)

per head over its hd channels, in float32, with learned gains g_q, g_k (hd,) per layer (shared by
the heads, 1 at start). The keys are normalized before ``encode_qk`` of METHOD, so the KV cache
holds them normalized and encoded; ``attend`` on raw q and k (``state=None``) normalizes them itself.
"""

import torch
from torch import nn

from posbench.attention.modifiers import Encoded, composed_signature, inner_state, keyword
from posbench.core.method import base_hook
from posbench.core.registry import register_modifier

EPS = 1e-6


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float = EPS) -> torch.Tensor:
    """x (B, H, T, hd) normalized over hd in float32, times gain (hd,), back in x's dtype."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps) * gain.float()).to(x.dtype)


@register_modifier
class QKNorm:
    name = "qknorm"
    place = 20  # METHOD+ssmax+qknorm+sink+gate: around ssmax, whose query scale then follows the norm
    acts_on = "probabilities"  # normalized q and k change P

    @staticmethod
    def compose(base: type) -> type:
        """``base`` with QK-norm: a subclass named ``<base.name>+qknorm``."""
        base_embed, base_encode, base_attend = (base_hook(base, h) for h in ("embed", "encode_qk", "attend"))

        def __init__(self, cfg, *args, qknorm_eps: float = EPS, **options):
            base.__init__(self, cfg, *args, **options)
            if not (isinstance(qknorm_eps, (int, float)) and 0 < qknorm_eps < 1):
                raise ValueError(f"{self.name}: qknorm_eps must be a number in (0, 1), got {qknorm_eps!r}")
            self.qknorm_eps = float(qknorm_eps)
            self.qk_gain = nn.Parameter(torch.ones(cfg.n_layers, 2, cfg.head_dim))  # (L, q/k, hd)

        composed_signature(base, __init__, keyword("qknorm_eps", EPS))

        def normalized(self, q, k, layer):
            g = self.qk_gain[layer]
            return rms_norm(q, g[0], self.qknorm_eps), rms_norm(k, g[1], self.qknorm_eps)

        def prepare(self, q_pos, k_pos, dtype):
            return Encoded(base.prepare(self, q_pos, k_pos, dtype))

        def embed(self, x, pos, state=None):
            return base_embed(self, x, pos, state=inner_state(state))

        def encode_qk(self, q, k, layer, state=None):
            q, k = normalized(self, q, k, layer)
            return base_encode(self, q, k, layer, state=inner_state(state))

        # PositionMethod.attend's signature, state included: it is passed on to the base's attend
        def attend(self, q, k, v, q_pos, k_pos, layer, state=None):  # noqa: PLR0913
            if not isinstance(state, Encoded):  # raw q and k: a call outside a model forward
                q, k = normalized(self, q, k, layer)
            return base_attend(self, q, k, v, q_pos, k_pos, layer, state=inner_state(state))

        def attn_backend(self, device, dtype) -> str:
            return base.attn_backend(self, device, dtype) + " + qk-norm"

        body = {
            "name": f"{base.name}+qknorm",
            "__init__": __init__,
            "prepare": prepare,
            "embed": embed,
            "encode_qk": encode_qk,
            "attend": attend,
            "attn_backend": attn_backend,
            "__module__": base.__module__,
            "__doc__": f"{base.name} with QK-norm (methods/qknorm.py).",
        }
        return type(f"{base.__name__}QKNorm", (base,), body)

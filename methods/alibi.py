"""ALiBi: attention with linear biases (Press, Smith, Lewis 2022, "Train Short, Test Long").

No position embeddings; every layer adds -m_h * (i - j) to the score of query i and key j, with a
fixed slope m_h per head from the paper's geometric sequence, not scaled by 1/sqrt(d). The bias
is built in float32 from the position tensors; it depends on nothing else, so ``BiasMethod``
caches it per positions and dtype. On a CPU, ``BiasMethod``'s linear plan runs it as PyTorch's
flash kernel with ``is_causal`` and a per-key (1, H, 1, Tk) mask (``linear_slopes``; float32 and
float64), or by
blocks from one distance row (half precision, Tq < Tk); a decode step and a GPU pass SDPA a
(1, H, Tq, Tk) mask that PyTorch broadcasts over the batch.

``bias_dtype``: "float32" (default; SambaNova's "ALiBi Deep Dive" shows a half-precision bias
collapses neighbouring distances onto one value) or "compute" (cast to the compute dtype, the
way many libraries do), for the precision study.
"""
import torch

from posbench.core.alibi_math import alibi_bias, slopes_tensor
from posbench.core.bias import BiasMethod
from posbench.core.registry import register

BIAS_DTYPES = ("float32", "compute")


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@register
class ALiBi(BiasMethod):
    name = "alibi"
    bias_relative = True  # -m (p_i - p_j): a function of the distance

    def __init__(self, cfg, bias_dtype: str = "float32"):
        super().__init__(cfg)
        if bias_dtype not in BIAS_DTYPES:
            raise ValueError(f"alibi: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")
        self.bias_dtype = bias_dtype
        self.register_position_buffer("slopes", slopes_tensor(cfg.n_heads))  # (H,)

    def _out_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float32 if self.bias_dtype == "float32" else dtype

    def bias(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """(1, H, Tq, Tk) -m_h (i - j), unmasked; float32, or ``dtype`` when bias_dtype is "compute"."""
        return alibi_bias(self.slopes, q_pos, k_pos).to(self._out_dtype(dtype))[None]

    def bias_key(self, dtype) -> tuple:
        return (self._out_dtype(dtype),)  # fixed slopes: the bias is a function of the positions

    def linear_slopes(self):
        """The slopes, for BiasMethod's linear plan (ALiBi as SDPA with is_causal); None with
        bias_dtype "compute", whose bias is rounded to the compute dtype on purpose."""
        return self.slopes if self.bias_dtype == "float32" else None

    def attn_backend(self, device, dtype) -> str:
        if torch.device(device).type == "cpu":
            return super().attn_backend(device, dtype)
        if dtype == torch.float32 or self.bias_dtype == "compute":
            return f"sdpa + {'float32' if dtype == torch.float32 else _short(dtype)} bias"
        # A float32 bias with half-precision q, k: SDPA wants the mask in the query's dtype.
        return "explicit float32 (B*H*L*L scores)"

"""ALiBi: attention with linear biases (Press, Smith, Lewis 2022, "Train Short, Test Long").

No position embeddings; every layer adds -m_h * (i - j) to the score of query i and key j, with a
fixed slope m_h per head from the paper's geometric sequence, not scaled by 1/sqrt(d). The bias is
built in float32 and depends on the positions alone, so it is cached across forwards; its form
(linear, a function of the distance) lets attention skip the L x L bias (docs/attention-plans.md).

``bias_dtype``: "float32" (default; SambaNova's "ALiBi Deep Dive" shows a half-precision bias
collapses neighbouring distances onto one value) or "compute" (cast to the compute dtype, the
way many libraries do), for the precision study.
"""

import torch

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.core.alibi_math import alibi_bias, slopes_tensor
from posbench.core.registry import register

BIAS_DTYPES = ("float32", "compute")


@register
class ALiBi(BiasMethod):
    name = "alibi"

    def __init__(self, cfg, bias_dtype: str = "float32"):
        super().__init__(cfg)
        if bias_dtype not in BIAS_DTYPES:
            raise ValueError(f"alibi: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")
        self.bias_dtype = bias_dtype
        self.register_position_buffer("slopes", slopes_tensor(cfg.n_heads))  # (H,)
        self._max_slope = float(self.slopes.abs().max())  # fixed: a Python number compiled code reads

    def _out_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return torch.float32 if self.bias_dtype == "float32" else dtype

    def bias(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """(1, H, Tq, Tk) -m_h (i - j), unmasked; float32, or ``dtype`` when bias_dtype is "compute"."""
        return alibi_bias(self.slopes, q_pos, k_pos).to(self._out_dtype(dtype))[None]

    def bias_form(self, dtype) -> BiasForm:
        """-m (p_i - p_j): a function of the distance, fixed (cached per positions and dtype); with
        bias_dtype "float32" exactly linear and float32 (with "compute" rounded on purpose)."""
        exact = self.bias_dtype == "float32"
        return BiasForm(
            relative=True,
            cache_key=(self._out_dtype(dtype),),
            slopes=self.slopes if exact else None,
            slope_bound=self._max_slope,
            dtype=torch.float32 if exact else None,
        )

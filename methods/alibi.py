"""ALiBi: attention with linear biases (Press, Smith, Lewis 2022, "Train Short, Test Long").

No position embeddings; every layer adds -m_h * (i - j) to the score of query i and key j, with a
fixed slope m_h per head from the paper's geometric sequence, not scaled by 1/sqrt(d). The bias
is built in float32 from the position tensors and cached (per positions, length and device), with
the causal mask folded in as -inf, then passed to SDPA as a (1, H, Tq, Tk) mask so PyTorch
broadcasts it over the batch.

``bias_dtype``: "float32" (default; SambaNova's "ALiBi Deep Dive" shows a half-precision bias
collapses neighbouring distances onto one value) or "compute" (cast to the compute dtype, the
way many libraries do), for the precision study.
"""
import torch

from posbench.core.alibi_math import alibi_bias, slopes_tensor
from posbench.core.method import PositionCache, PositionMethod, causal_attention, mask_bias
from posbench.core.registry import register

BIAS_DTYPES = ("float32", "compute")


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@register
class ALiBi(PositionMethod):
    name = "alibi"

    def __init__(self, cfg, bias_dtype: str = "float32"):
        super().__init__(cfg)
        if bias_dtype not in BIAS_DTYPES:
            raise ValueError(f"alibi: bias_dtype must be one of {', '.join(BIAS_DTYPES)}, got {bias_dtype!r}")
        self.bias_dtype = bias_dtype
        self.register_position_buffer("slopes", slopes_tensor(cfg.n_heads))  # (H,)
        self._cache = PositionCache()

    def bias(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """(1, H, Tq, Tk) bias with the causal mask folded in as -inf; float32, or ``dtype`` when
        bias_dtype is "compute". Cached per positions tensors across forward passes (training
        repeats the same positions every step)."""
        out = torch.float32 if self.bias_dtype == "float32" else dtype

        def build():
            if q_pos.shape[0] == 1:
                # A decode step: its k_pos is new every step, so no earlier entry will be asked
                # for again, and the prefill's (1, H, C, C) bias would otherwise stay alive
                # through the first decode steps. The row built here is (1, H, 1, C).
                self._cache.clear()
            return mask_bias(alibi_bias(self.slopes, q_pos, k_pos).to(out))[None]

        return self._cache.get((q_pos, k_pos), build, extra=(out,))

    def attn_backend(self, device, dtype) -> str:
        if dtype == torch.float32 or self.bias_dtype == "compute":
            return f"sdpa + {'float32' if dtype == torch.float32 else _short(dtype)} bias"
        # A float32 bias with half-precision q, k: SDPA wants the mask in the query's dtype.
        return "explicit float32 (B*H*L*L scores)"

    def prepare(self, q_pos, k_pos, dtype) -> torch.Tensor:
        return self.bias(q_pos, k_pos, dtype)  # (1, H, Tq, Tk), shared by every layer

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        bias = state if state is not None else self.bias(q_pos, k_pos, q.dtype)
        return causal_attention(q, k, v, bias, masked=True)

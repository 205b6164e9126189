"""Rotary with Llama 3.1's frequency scaling (Meta 2024, "The Llama 3 Herd of Models"; the
reference code's ``apply_scaling``, Hugging Face's ``_compute_llama3_parameters``).

Per pair i with wavelength lambda_i = 2 pi / theta_i and L0 = L_train (Llama 3.1's
``original_max_position_embeddings``, 8192, is its pre-training length):
  * lambda_i < L0 / ``high_freq_factor`` (4): kept, theta_i;
  * lambda_i > L0 / ``low_freq_factor`` (1): interpolated, theta_i / s;
  * between: (1 - g) theta_i / s + g theta_i with g = (L0 / lambda_i - low) / (high - low),
    a ramp linear in L0 / lambda_i (YaRN's "ratio" ramp with alpha, beta = low, high).
No attention temperature. s is ``factor``: null (the default, as the other scaled rows but
``rotary_ntk``) is s = max(1, L / L_train) for the evaluation length L, so within L_train the row
is ``rotary`` and at 8 x L_train its frequencies are Llama 3.1's (factor 8); ``factor: 8`` is Llama
3.1's static form (it then needs L_train: ``train_len``, or a trained model). Evaluation mode only,
like every scaled row (``methods/rotary.py``).
"""

import math

import torch

from posbench.core import registry
from posbench.core.registry import register

Rotary = registry.get("rotary")


@register
class RotaryLlama3(Rotary):
    name = "rotary_llama3"
    scalings = ("llama3",)

    def __init__(
        self,
        cfg,
        factor: float | None = None,
        train_len: int | None = None,
        base: float = 10000.0,
        low_freq_factor: float = 1.0,
        high_freq_factor: float = 4.0,
    ):
        ok = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (low_freq_factor, high_freq_factor))
        if not (ok and 0 < low_freq_factor < high_freq_factor):
            raise ValueError(
                f"rotary_llama3: need 0 < low_freq_factor < high_freq_factor, got {low_freq_factor!r} and {high_freq_factor!r}"
            )
        super().__init__(cfg, base=base, scaling="llama3", factor=factor, train_len=train_len)
        self.low_freq_factor, self.high_freq_factor = float(low_freq_factor), float(high_freq_factor)

    def scaled_inv_freq(self, s: float, L_train: int, length: int | None = None) -> tuple[torch.Tensor, float]:
        theta = self.base_inv_freq()  # (hd/2,) float64
        self.need_train_len(s, L_train)
        if s == 1.0:
            return theta, 1.0
        low, high = self.low_freq_factor, self.high_freq_factor
        wavelen = 2 * math.pi / theta
        # 0 past L0 / low (interpolate), 1 below L0 / high (keep), linear in L0 / lambda between
        keep = ((L_train / wavelen - low) / (high - low)).clamp(0.0, 1.0)
        return (1 - keep) * theta / s + keep * theta, 1.0

    def extra_repr(self) -> str:
        return (
            f"name={self.name!r}, factor={self.factor}, low_freq_factor={self.low_freq_factor}, "
            f"high_freq_factor={self.high_freq_factor}"
        )

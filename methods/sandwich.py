"""Sandwich (Chi, Fan, Rudnicky, Ramadge 2023, "Dissecting Transformer Length Extrapolation via the
Lens of Receptive Field Analysis", ACL, section 5).

No position embeddings and no parameters; every layer adds to the score of query i and key j
(unscaled by 1/sqrt(d), as ALiBi) the inner product of two sinusoidal position vectors of
dimension d', shifted to 0 at distance 0 and compressed per head as ALiBi's slopes are:

    bias_h(i, j) = (sum_{k=1..d'/2} cos((i - j) / 10000^(2k/d')) - d'/2) / (8h / H),   h = 1..H.

p_i . p_j is sum_k [sin a_i sin a_j + cos a_i cos a_j] = sum_k cos(a_i - a_j); at distance 0 it is
d'/2, so the bias is <= 0 and decays roughly logarithmically with the distance (then oscillates
gently around -d'/2). The constants (k from 1 to d'/2, d' the head dimension, the 8h/H divisor)
are those of NeMo's ``SandwichRelativePositionEmbedding``, the public implementation of the
paper's Megatron code; ``dim`` sets d'. A function of the distance alone, float32, fixed: cached
across forwards like ALiBi's, and attention takes the distance-row plan on a CPU (no L x L bias).
"""

import torch

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.core.registry import register
from posbench.triton_kernels.distance_rows import FusedDistanceRows


def sandwich_bias(distance: torch.Tensor, dim: int, n_heads: int) -> torch.Tensor:
    """(H, *distance.shape) float32 bias for distances i - j (integers or floats)."""
    k = torch.arange(1, dim // 2 + 1, dtype=torch.float64, device=distance.device)
    inv_freq = (10000.0 ** (-2.0 * k / dim)).to(torch.float32)  # (d'/2,)
    angles = distance.to(torch.float32)[..., None] * inv_freq  # (..., d'/2)
    inner = angles.cos().sum(-1) - dim / 2  # p_i . p_j - d'/2, <= 0
    heads = torch.arange(1, n_heads + 1, dtype=torch.float32, device=distance.device) * (8.0 / n_heads)
    return inner[None] / heads.view(-1, *([1] * distance.dim()))


@register
class Sandwich(FusedDistanceRows, BiasMethod):  # on CUDA: the fused row kernel
    name = "sandwich"

    def __init__(self, cfg, dim: int | None = None):
        super().__init__(cfg)
        dim = cfg.head_dim if dim is None else dim
        if not (isinstance(dim, int) and dim >= 2 and dim % 2 == 0):
            raise ValueError(f"sandwich: dim must be an even integer >= 2 (or null: the head dimension), got {dim!r}")
        self.dim = dim

    def bias(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """(H, Tq, Tk) float32, unmasked."""
        return sandwich_bias(q_pos[:, None] - k_pos[None, :], self.dim, self.cfg.n_heads)

    def bias_form(self, dtype) -> BiasForm:
        return BiasForm(relative=True, cache_key=("float32",), dtype=torch.float32)

"""FIRE: Functional Interpolation for Relative Positions (Li et al. 2024, "Functional Interpolation
for Relative Positions Improves Long Context Transformers", ICLR).

No position embeddings; every layer adds to the score of query i and key j (unscaled by 1/sqrt(d))

    b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),    psi(x) = log(c x + 1),

where f_theta is an MLP R -> R^H (one hidden layer of ``mlp_width`` = 32 ReLU units, one output
per head), c > 0 a learned scalar (init ``init_c`` = 0.1) and L a learned threshold (init
``init_L`` = 512; stored as a multiplier of init_L, as the paper's code does). Dividing by
psi(max(L, i)) is the "progressive interpolation": the MLP's input stays in [0, 1] at any query
position, so longer inputs reuse the range training saw. |c| and |L| are used, so both stay
positive; ``eps`` = 1e-6 guards the division. One MLP shared by all layers.

The bias (H, Tq, Tk) is built once per forward and shared by every layer. f_theta is a ReLU MLP of
a scalar, so it is linear between its mlp_width breakpoints: ``ratio_pieces`` gives the same bias
as O(L) pieces (one row of psi, one column of normalisers), its declared form, from which
attention forms it tile by tile with no (H, L, L) tensor (docs/attention-plans.md).
The MLP's weights are plain parameters drawn like ``nn.Linear``'s default (the model re-draws every
``nn.Linear`` at std 0.02, which would start the bias at ~1e-4).
"""

import math

import torch
from torch import nn

from posbench.attention.bias import BiasForm, BiasMethod
from posbench.attention.piecewise import RatioPieces, relu_mlp_pieces
from posbench.core.registry import register


@register
class Fire(BiasMethod):
    name = "fire"

    def __init__(self, cfg, mlp_width: int = 32, init_c: float = 0.1, init_L: float = 512.0, eps: float = 1e-6):
        super().__init__(cfg)
        if not isinstance(mlp_width, int) or mlp_width < 1:
            raise ValueError(f"fire: mlp_width must be a positive integer, got {mlp_width!r}")
        for key, value in (("init_c", init_c), ("init_L", init_L), ("eps", eps)):
            if not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"fire: {key} must be a positive number, got {value!r}")
        self.init_L, self.eps = float(init_L), float(eps)
        h = cfg.n_heads
        self.c = nn.Parameter(torch.tensor(float(init_c)))
        self.L_multiplier = nn.Parameter(torch.tensor(1.0))
        bound = 1.0 / math.sqrt(mlp_width)  # nn.Linear's default bounds: 1/sqrt(fan_in)
        self.w1 = nn.Parameter(torch.empty(mlp_width).uniform_(-1.0, 1.0))  # (W,) fan_in 1
        self.b1 = nn.Parameter(torch.empty(mlp_width).uniform_(-1.0, 1.0))  # (W,)
        self.w2 = nn.Parameter(torch.empty(h, mlp_width).uniform_(-bound, bound))  # (H, W)
        self.b2 = nn.Parameter(torch.empty(h).uniform_(-bound, bound))  # (H,)

    def _layout(self, q_pos, k_pos):
        """(distance (Tq, Tk), query positions (Tq, 1)), float32, cached per positions tensors.
        Future keys get distance 0 (masked anyway)."""

        def build():
            qp, kp = q_pos.to(torch.float32), k_pos.to(torch.float32)
            return (qp[:, None] - kp[None, :]).clamp(min=0), qp[:, None]

        return self._cache.get((q_pos, k_pos), build)

    def normalized_distance(self, q_pos, k_pos) -> torch.Tensor:
        """(Tq, Tk) psi(i - j) / psi(max(L, i)), the MLP's input."""
        distance, qp = self._layout(q_pos, k_pos)
        return torch.log1p(self.c.float().abs() * distance) / self._normaliser(qp)  # (Tq, Tk) / (Tq, 1)

    def _normaliser(self, qp: torch.Tensor) -> torch.Tensor:
        """psi(max(L, i)) + eps for query positions qp (float32, any shape)."""
        c = self.c.float().abs()
        threshold = (self.L_multiplier.float() * self.init_L).abs()
        return torch.log1p(c * torch.maximum(qp, threshold)) + self.eps

    def bias_form(self, dtype) -> BiasForm:
        return BiasForm(pieces=self.ratio_pieces)

    def ratio_pieces(self, q_pos, k_pos) -> RatioPieces:
        """The bias as g(psi(i - j) / psi(max(L, i))), g the MLP as its linear pieces: one (Tk,)
        row of psi, one (Tq,) column of normalisers, (H, W + 1) tables (consecutive positions)."""
        kp = k_pos.to(torch.float32)
        row = torch.log1p(self.c.float().abs() * (kp[-1] - kp))  # (Tk,): psi at distance Tk - 1 - t
        z = self._normaliser(q_pos.to(torch.float32))  # (Tq,)
        return RatioPieces(row, z, *relu_mlp_pieces(self.w1.float(), self.b1.float(), self.w2.float(), self.b2.float()))

    def bias(self, q_pos, k_pos, dtype=torch.float32) -> torch.Tensor:
        """(H, Tq, Tk) f_theta(normalised distance) in ``dtype``, unmasked."""
        x = self.normalized_distance(q_pos, k_pos)
        tq, tk = x.shape
        hidden = torch.relu(x.reshape(-1, 1) * self.w1.float() + self.b1.float())  # (Tq * Tk, W)
        # (H, W) @ (W, Tq * Tk): the (H, Tq, Tk) layout attention wants, no permute
        bias = torch.addmm(self.b2.float()[:, None], self.w2.float(), hidden.t()).view(-1, tq, tk)
        return bias.to(dtype)

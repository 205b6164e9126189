"""A learned attention bias computed once per forward pass and shared by every layer.

Bias methods with parameters (``kerple_log``, ``fire``) cannot cache their bias across forward
passes (the parameters change every step), but within one forward every layer needs the same
tensor. ``embed`` runs once at the bottom of each forward and arms a ``ForwardBias``; the first
layer builds the bias, later layers reuse the same tensor object (autograd sums their gradients,
so the bias's own backward runs once), and the last layer drops it, so no graph outlives its
forward. Calls of ``attend`` outside a model forward (not armed) build the bias each time.
"""
from __future__ import annotations

import torch

from .method import causal_attention, causal_explicit_attention


class ForwardBias:
    def __init__(self, n_layers: int):
        self.n_layers = n_layers
        self._held: tuple | None = None  # (q_pos, k_pos, key, bias)
        self._armed = False

    def arm(self) -> None:
        """Called by the method's ``embed``: a new forward pass begins."""
        self._held, self._armed = None, True

    def get(self, q_pos, k_pos, key: tuple, layer: int, build) -> torch.Tensor:
        """The bias for these position tensors (identity) and ``key`` (dtype, parameter versions,
        grad mode), built by ``build()`` at most once per forward pass."""
        if not self._armed:
            return build()
        hit = self._held
        if hit is not None and hit[0] is q_pos and hit[1] is k_pos and hit[2] == key:
            bias = hit[3]
        else:
            bias = build()
        if layer >= self.n_layers - 1:  # the last layer: this forward is done with it
            self._held, self._armed = None, False
        else:
            self._held = (q_pos, k_pos, key, bias)
        return bias


def biased_attention(q, k, v, bias: torch.Tensor) -> torch.Tensor:
    """Causal attention with a bias (H, Tq, Tk) that already holds -inf on future keys.

    A bias that needs a gradient sends CPU SDPA to its math path; on a CPU in float32 the explicit
    computation is the same arithmetic without that path's extra passes and skips the key blocks
    entirely in the future (as ``t5_bias`` does)."""
    if bias.requires_grad and q.dtype == torch.float32 and q.device.type == "cpu":
        return causal_explicit_attention(q, k, v, bias)
    return causal_attention(q, k, v, bias, masked=True)

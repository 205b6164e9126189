"""Bias methods: position information as a bias added to the attention scores.

ALiBi, T5's relative bias, KERPLE and FIRE differ only in the bias they build; everything else
(building it once per forward, masking the future, attending with it) is this base's. A bias
method implements one function:

    bias(q_pos, k_pos, dtype) -> (H, Tq, Tk)   # or a shape that broadcasts to it, e.g. (1, Tq, Tk)

the bias added to the score q_i . k_j / sqrt(hd) of query i and key j, unscaled. q_pos (Tq,) and
k_pos (Tk,) are the positions (integers, or floats when interpolating); ``dtype`` is the compute
dtype of q and k. Return it in ``dtype``, or in float32 to keep it exact (attention then computes
its scores in float32). ``BiasMethod`` does the rest of the method contract:

- ``prepare`` builds the bias once per model forward, folds in the causal mask (-inf on future
  keys) and hands that one tensor to every layer, so a learned bias's gradient is computed once
  per backward, not once per layer;
- ``attend`` attends with the prepared bias or, called with ``state=None`` outside a model, with
  the bias built right there from the positions and its parameters, uncached: the plain
  reference the prepared path is checked against (the conformance kit's ``prepared_attend``);
- ``attend_bias(q, k, v, bias)`` is the one attention call of every bias method. A blocked or
  flash attention path for biases replaces it here, for all of them at once.

Optional, for speed:
- ``bias_key(dtype)``: what the bias depends on besides the positions, when it may be kept across
  forwards (ALiBi's fixed slopes: only the dtype it is built in). The base then caches the masked
  bias per positions tensors and that key. None (the default) builds it every forward, as a bias
  with learned parameters must be.
- ``bias_masked = True``: ``bias`` already holds -inf on every future key (t5_bias folds the mask
  into its gather at no cost); the base then adds no masking pass.
"""
from __future__ import annotations

from typing import ClassVar, Hashable

import torch

from posbench.core.method import ModelConfig, PositionCache, PositionMethod, biased_attention, causal_mask


class BiasMethod(PositionMethod):
    """Base of the methods that add a bias to the attention scores; subclasses implement
    ``bias`` (and ``bias_key`` for a bias that may be cached). See the module docstring."""

    bias_masked: ClassVar[bool] = False  # True: bias() already holds -inf on future keys

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        # Positions-keyed results across layers and forwards: the bias (with a bias_key), and
        # whatever a subclass derives from the positions alone (bucket ids, distances).
        self._cache = PositionCache()

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(H, Tq, Tk), or broadcastable to it: the bias on the score of query i and key j."""
        raise NotImplementedError(f"{type(self).__name__} (method {self.name!r}) must implement bias(q_pos, k_pos, dtype)")

    def bias_key(self, dtype: torch.dtype) -> tuple[Hashable, ...] | None:
        """What the bias depends on besides the positions, when it may be reused across forwards
        (a tuple of hashables); None: built afresh every forward (the default)."""
        return None

    def masked_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``bias`` with -inf on every future key (bottom-right aligned), uncached."""
        out = self.bias(q_pos, k_pos, dtype)
        tq, tk = q_pos.shape[0], k_pos.shape[0]
        if self.bias_masked or tq == 1:  # a single query (a decode step) sees every key
            return out
        # A (Tq, Tk) bool compare, small beside the (H, Tq, Tk) bias: not worth a cache entry.
        # masked_fill broadcasts: an (H, 1, Tk) bias comes out (H, Tq, Tk), a (1, Tq, Tk) one stays.
        return out.masked_fill(~causal_mask(tq, tk, out.device), float("-inf"))

    def prepare(self, q_pos, k_pos, dtype) -> torch.Tensor:
        """The masked bias every layer of this forward attends with, cached when ``bias_key``
        says it may be."""
        key = self.bias_key(dtype)
        if key is None:
            return self.masked_bias(q_pos, k_pos, dtype)

        def build():
            if q_pos.shape[0] == 1:
                # A decode step: its k_pos is new every step, so no earlier entry will be asked
                # for again, and the prefill's (H, C, C) bias would otherwise stay alive through
                # the first decode steps. What is built here is one (H, 1, C) row.
                self._cache.clear()
            return self.masked_bias(q_pos, k_pos, dtype)

        return self._cache.get((q_pos, k_pos), build, extra=("bias", *key))

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd), with the prepared bias, or
        (state None) the bias built here from the positions: the reference path."""
        bias = state if state is not None else self.masked_bias(q_pos, k_pos, q.dtype)
        return self.attend_bias(q, k, v, bias)

    def attend_bias(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """Causal attention with a bias that already holds -inf on future keys: the one place a
        bias method attends (a fused path for biases plugs in here)."""
        return biased_attention(q, k, v, bias)

    def attn_backend(self, device, dtype) -> str:
        """What ``attend_bias`` runs in training: a learned bias (one that needs a gradient) in
        float32 on a CPU takes the explicit computation over causal blocks, anything else SDPA
        with the bias as its mask (a method whose bias keeps another dtype says so itself)."""
        learned = any(p.requires_grad for p in self.parameters())
        if learned and dtype == torch.float32 and torch.device(device).type == "cpu":
            return "explicit float32, causal blocks (learned bias)"
        return f"sdpa + {str(dtype).removeprefix('torch.')} bias" + (" (learned)" if learned else "")

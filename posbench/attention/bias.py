"""Bias methods: position information as a bias added to the attention scores.

ALiBi, T5's relative bias, KERPLE and FIRE differ only in the bias they build; a subclass of
``BiasMethod`` writes

    bias(q_pos, k_pos, dtype) -> (H, Tq, Tk)   # or a shape that broadcasts to it, e.g. (1, Tq, Tk)

the bias on the score q_i . k_j / sqrt(hd), unscaled, in ``dtype`` (or float32, kept exact), and
optionally ``bias_form(dtype)``: a ``BiasForm`` saying what else is known of the bias (its
slopes, a function of the distance alone, its pieces, already masked, cacheable), from which
attention picks a faster plan. The base builds the bias once per forward, masks the future keys
and hands it to every layer; ``attend`` with ``state=None`` builds it there, the plain reference.
"""

from __future__ import annotations

import torch

from posbench.attention import routes
from posbench.attention.form import BiasForm
from posbench.core.masked import causal_mask
from posbench.core.method import ModelConfig, PositionCache, PositionMethod

__all__ = ["BiasForm", "BiasMethod"]


class BiasMethod(PositionMethod):
    """Base of the methods that add a bias to the attention scores; subclasses implement ``bias``
    (and ``bias_form`` to declare more). See the module docstring."""

    softmax_shift = True  # the plans may drop a per-query constant (ALiBi's linear plan: -m i)

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg)
        # Positions-keyed results across layers and forwards: the bias (with a cache key), and
        # whatever a subclass derives from the positions alone (bucket ids, distances).
        self._cache = PositionCache()

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """(H, Tq, Tk), or broadcastable to it: the bias on the score of query i and key j."""
        raise NotImplementedError(f"{type(self).__name__} (method {self.name!r}) must implement bias(q_pos, k_pos, dtype)")

    def checked_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``bias``, its shape checked against (H, Tq, Tk): a plugin's wrong shape is one line saying
        what came back, not torch's size error in every layer."""
        out = self.bias(q_pos, k_pos, dtype)
        want = (self.cfg.n_heads, q_pos.shape[0], k_pos.shape[0])
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else None
        while shape is not None and len(shape) > 3 and shape[0] == 1:
            shape = shape[1:]  # a leading batch axis of 1 (ALiBi's (1, H, Tq, Tk)) broadcasts over the batch
        try:
            fits = shape is not None and torch.broadcast_shapes(shape, want) == want
        except RuntimeError:
            fits = False
        if not fits:
            got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
            raise ValueError(
                f"method {self.name!r}: bias() returned {got} where (H, Tq, Tk) = {want} was expected "
                "(or a shape that broadcasts to it)"
            )
        return out

    def bias_form(self, dtype: torch.dtype) -> BiasForm:
        """What is known of the bias built for compute ``dtype`` (default: nothing)."""
        return BiasForm()

    def masked_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """``bias`` with -inf on every future key (bottom-right aligned), uncached."""
        out = self.checked_bias(q_pos, k_pos, dtype)
        tq, tk = q_pos.shape[0], k_pos.shape[0]
        if tq == 1 or self.bias_form(dtype).masked:  # a single query (a decode step) sees every key
            return out
        # A (Tq, Tk) bool compare, small beside the (H, Tq, Tk) bias: not worth a cache entry.
        # masked_fill broadcasts: an (H, 1, Tk) bias comes out (H, Tq, Tk), a (1, Tq, Tk) one stays.
        return out.masked_fill(~causal_mask(tq, tk, out.device), float("-inf"))

    def prepare(self, q_pos, k_pos, dtype):
        """What every layer of this forward attends with (attention's plan for the bias, or the
        masked bias), kept across forwards when the form has a cache key."""
        form = self.bias_form(dtype)
        if form.cache_key is None:
            return routes.prepare(self, form, q_pos, k_pos, dtype)

        def build():
            if q_pos.shape[0] == 1:
                # A decode step: its k_pos is new every step, so no earlier entry will be asked
                # for again, and the prefill's (H, C, C) bias would otherwise stay alive through
                # the first decode steps. What is built here is one (H, 1, C) row.
                self._cache.clear()
            return routes.prepare(self, form, q_pos, k_pos, dtype)

        return self._cache.get((q_pos, k_pos), build, extra=("bias", *form.cache_key))

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd), with the prepared bias, or
        (state None) the bias built here from the positions: the reference path. Each query sees
        the keys of its layer's window (``self.window(layer)``)."""
        return routes.attend(q, k, v, state if state is not None else self.masked_bias(q_pos, k_pos, q.dtype), self.window(layer))

    @classmethod
    def position_flops(cls, cfg: ModelConfig, seq_len: int) -> int:
        """The bias (H, T, T) added to the scores in every layer (posbench.engine.flops)."""
        return cfg.n_layers * cfg.n_heads * seq_len * seq_len

    def attn_backend(self, device, dtype) -> str:
        return routes.training_name(self, self.bias_form(dtype), device, dtype)

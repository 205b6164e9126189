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
- ``attend_bias(q, k, v, bias)`` is the one attention call of every bias method; ``bias`` is the
  masked bias tensor or a ``BlockedBias`` plan (below).

Long inputs without the L x L square (``posbench.core.blocked_attention``): on a CPU, ``prepare``
of a forward with more than one query returns a ``BlockedBias`` plan instead of the (H, Tq, Tk)
bias, and attention forms each block's bias tile itself, skipping the causal upper triangle and
recomputing in backward instead of saving probabilities. The plan takes the first of:

- ``linear``: ``linear_slopes()`` gives per-head slopes m (the bias is -m (p_i - p_j), ALiBi),
  float32 or float64, Tq == Tk, and m * L small enough (``LINEAR_SPAN``): ALiBi as PyTorch's
  flash kernel with ``is_causal`` and a (1, H, 1, Tk) mask, since the bias of row i is
  m p_j plus a constant (``blocked_attention.linear_bias_sdpa``);
- ``distance``: ``bias_relative = True`` (the bias depends on p_i - p_j only) and consecutive
  integer positions: the bias is one row, ``bias(k_pos[-1:], k_pos)``, and every tile a view of it;
- ``piecewise``: ``bias_pieces`` gives the bias as g_h(u(p_i - p_j) / z_i), g piecewise linear,
  at consecutive integer positions (FIRE: ``posbench.core.piecewise_bias``): each tile from one
  (Tk,) row of u, one (Tq,) column of z and (H, pieces) tables, no square;
- ``dense``: anything else (a plugin that writes only ``bias``, float positions): the
  masked bias (H, Tq, Tk) built once per forward, each tile a view of it (the bias's square and
  its gradient stay, once per forward; no layer saves probabilities);
- ``tiles``: ``bias_per_block = True`` instead of dense: each tile is ``masked_bias`` of the
  block's positions, built in every layer (no square at all; for a cheap bias).

A single query (a decode step) and devices other than a CPU keep the masked bias and SDPA (on a
GPU the Triton kernels are the fast path). ``attn_backend`` names the path a row's training took.

Optional, for speed:
- ``bias_key(dtype)``: what the bias depends on besides the positions, when it may be kept across
  forwards (ALiBi's fixed slopes: only the dtype it is built in). The base then caches the masked
  bias per positions tensors and that key. None (the default) builds it every forward, as a bias
  with learned parameters must be.
- ``bias_masked = True``: ``bias`` already holds -inf on every future key (t5_bias folds the mask
  into its gather at no cost); the base then adds no masking pass.
- ``bias_relative = True``: the bias is a function of p_i - p_j alone (ALiBi, T5, KERPLE), so at
  consecutive integer positions it is given by one row (the ``distance`` plan above).
- ``linear_slopes()``: (H,) slopes when the bias is exactly -m_h (p_i - p_j) (the ``linear`` plan).
- ``bias_pieces(q_pos, k_pos)``: the bias as a ``RatioPieces`` (the ``piecewise`` plan above).
- ``bias_per_block = True``: ``bias`` is cheap enough to build per block in every layer (the
  ``tiles`` plan: never an (H, L, L) tensor, at the cost of building the bias 3 x layers times).
"""
from __future__ import annotations

from typing import ClassVar, Hashable

import torch

from posbench.core import blocked_attention
from posbench.core.blocked_attention import BLOCK_ROWS, BiasTiles, DenseBias, DistanceRow, blocked_bias_attention, linear_bias_sdpa
from posbench.core.method import ModelConfig, PositionCache, PositionMethod, biased_attention, causal_mask
from posbench.core.piecewise_bias import PiecewiseRatio, RatioPieces

# The linear plan rounds each score at the magnitude of m * L / 2 (blocked_attention's
# linear_bias_sdpa); beyond this max slope x span of positions the distance plan is taken.
LINEAR_SPAN = 2048.0
# Fewer query rows than this: the masked bias and SDPA (or the explicit path); the square is small
# and one fused call beats a Python loop over blocks. Measured (attention forward + backward,
# 4 heads of 32, one thread): at L 256 the mask path took 1.04x is_causal SDPA and T5's explicit
# path 1.09x, the slope column 1.22x and blocks of 64 rows 1.19x; at L 2048 those were 1.76x,
# 5.9x, 1.16x and 1.22x. docs/kernels.md has the numbers.
BLOCKED_MIN_ROWS = 512
# What the linear plan runs on a CPU whose torch has the flash op with a mask (torch 2.3 on).
LINEAR_BACKEND = "sdpa flash causal + per-key slope mask (linear bias, no L x L)"


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class BlockedBias:
    """A forward's bias as a plan for ``blocked_attention`` (see the module docstring): ``kind``
    is "linear", "distance", "piecewise", "tiles" or "dense"; it attends with ``attend(q, k, v)``."""

    def __init__(self, method: "BiasMethod", q_pos, k_pos, dtype: torch.dtype):
        self.q_pos, self.k_pos, self.dtype = q_pos, k_pos, dtype
        self.slopes = method.linear_slopes()
        tq, tk = q_pos.shape[0], k_pos.shape[0]
        self.row = self.pieces = None
        self.method = method
        if (self.slopes is not None and dtype in (torch.float32, torch.float64) and tq == tk
                and float(self.slopes.abs().max()) * _span(k_pos) <= LINEAR_SPAN):
            self.kind = "linear"
        elif method.bias_relative and _consecutive(k_pos):
            self.kind = "distance"
            row = method.bias(k_pos[-1:], k_pos, dtype)  # (..., 1, Tk): the last query against every key
            self.row = row.reshape(-1, tk)  # (h, Tk): row[t] is the bias at distance Tk - 1 - t
        elif _consecutive(k_pos) and (pieces := method.bias_pieces(q_pos, k_pos)) is not None:
            self.kind, self.pieces = "piecewise", pieces
        elif method.bias_per_block:
            self.kind = "tiles"
        else:
            self.kind = "dense"
            bias = method.masked_bias(q_pos, k_pos, dtype)
            self.bias = bias.reshape(-1, *bias.shape[-2:]).expand(-1, tq, tk)  # (h, Tq, Tk)

    def attend(self, q, k, v) -> torch.Tensor:
        if self.kind == "linear":
            return linear_bias_sdpa(q, k, v, self.slopes.to(q.device), self.k_pos)
        cdt = torch.float64 if q.dtype == torch.float64 else torch.float32
        rows = BLOCK_ROWS
        if self.kind == "distance":
            return blocked_bias_attention(q, k, v, DistanceRow(self.row, k.shape[-2], rows, cdt), (self.row,), rows)
        if self.kind == "piecewise":
            p = self.pieces
            inputs = (p.row, p.z, p.slopes, p.intercepts)
            return blocked_bias_attention(q, k, v, PiecewiseRatio(p, k.shape[-2], rows, cdt), inputs, rows)
        if self.kind == "dense":
            return blocked_bias_attention(q, k, v, DenseBias(self.bias, cdt), (self.bias,), rows)
        q_pos, k_pos, method, dtype = self.q_pos, self.k_pos, self.method, self.dtype

        def tile(r0: int, n: int, nk: int) -> torch.Tensor:  # (..., n, nk), future keys -inf
            return method.masked_bias(q_pos[r0:r0 + n], k_pos[:nk], dtype)

        params = tuple(p for p in method.parameters() if p.requires_grad) if torch.is_grad_enabled() else ()
        return blocked_bias_attention(q, k, v, BiasTiles(tile, params, cdt), params, rows)



def _span(k_pos: torch.Tensor) -> float:
    return float(k_pos[-1] - k_pos[0]) if k_pos.numel() > 1 else 0.0


def _consecutive(k_pos: torch.Tensor) -> bool:
    """Integer positions p_0, p_0 + 1, ..., (increasing, as the method contract requires)."""
    return not k_pos.is_floating_point() and int(k_pos[-1] - k_pos[0]) == k_pos.numel() - 1


class BiasMethod(PositionMethod):
    """Base of the methods that add a bias to the attention scores; subclasses implement
    ``bias`` (and ``bias_key`` for a bias that may be cached). See the module docstring."""

    bias_masked: ClassVar[bool] = False  # True: bias() already holds -inf on future keys
    bias_relative: ClassVar[bool] = False  # True: bias() depends on q_pos - k_pos alone
    bias_per_block: ClassVar[bool] = False  # True: bias() is cheap enough to build per block and layer

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

    def linear_slopes(self) -> torch.Tensor | None:
        """(H,) slopes m when the bias is exactly -m_h (p_i - p_j) (ALiBi); None otherwise."""
        return None

    def bias_pieces(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> RatioPieces | None:
        """The bias as a piecewise-linear function of u(p_i - p_j) / z_i at consecutive integer
        positions (``posbench.core.piecewise_bias``; FIRE), for the piecewise plan; None (the
        default): the method has no such form."""
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

    def blocked_here(self, q_pos: torch.Tensor) -> bool:
        """Whether a forward at ``q_pos`` attends by blocks (a ``BlockedBias`` plan): on a CPU, with
        at least ``BLOCKED_MIN_ROWS`` queries."""
        return q_pos.device.type == "cpu" and q_pos.shape[0] >= BLOCKED_MIN_ROWS

    def prepare(self, q_pos, k_pos, dtype) -> torch.Tensor | BlockedBias:
        """What every layer of this forward attends with: a ``BlockedBias`` plan where
        ``blocked_here``, else the masked bias; cached when ``bias_key`` says it may be."""
        blocked = self.blocked_here(q_pos)
        key = self.bias_key(dtype)
        if key is None:
            return BlockedBias(self, q_pos, k_pos, dtype) if blocked else self.masked_bias(q_pos, k_pos, dtype)

        def build():
            if q_pos.shape[0] == 1:
                # A decode step: its k_pos is new every step, so no earlier entry will be asked
                # for again, and the prefill's (H, C, C) bias would otherwise stay alive through
                # the first decode steps. What is built here is one (H, 1, C) row.
                self._cache.clear()
            return BlockedBias(self, q_pos, k_pos, dtype) if blocked else self.masked_bias(q_pos, k_pos, dtype)

        return self._cache.get((q_pos, k_pos), build, extra=("bias", blocked, *key))

    def attend(self, q, k, v, q_pos, k_pos, layer, state=None):
        """q (B, H, Tq, hd), k, v (B, H, Tk, hd) -> (B, H, Tq, hd), with the prepared bias, or
        (state None) the bias built here from the positions: the reference path."""
        bias = state if state is not None else self.masked_bias(q_pos, k_pos, q.dtype)
        return self.attend_bias(q, k, v, bias)

    def attend_bias(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias) -> torch.Tensor:
        """Causal attention with ``bias``: a ``BlockedBias`` plan, or a bias tensor that already
        holds -inf on future keys. The one place a bias method attends."""
        if isinstance(bias, BlockedBias):
            return bias.attend(q, k, v)
        return biased_attention(q, k, v, bias)

    def attn_backend(self, device, dtype) -> str:
        """What ``attend_bias`` runs in training at integer positions 0..L-1 with L of at least
        ``BLOCKED_MIN_ROWS`` (shorter inputs take the masked bias's path, as a GPU does): on a
        CPU the ``BlockedBias`` plan's kind; elsewhere SDPA with the bias as its mask (a method
        whose bias keeps another dtype says so itself)."""
        learned = any(p.requires_grad for p in self.parameters())
        if torch.device(device).type == "cpu":
            flash = blocked_attention.flash_here(device)  # torch has the CPU flash op with a mask
            if self.linear_slopes() is not None and dtype in (torch.float32, torch.float64):
                return LINEAR_BACKEND if flash else "sdpa causal + slope column (linear bias, no L x L)"
            blocked = "blocked float32" + (" (flash op per block)" if flash else "")  # block_softmax
            if self.bias_relative:
                return f"{blocked}, distance row (no L x L)"
            if type(self).bias_pieces is not BiasMethod.bias_pieces:
                return f"{blocked}, piecewise-linear bias tiles (no L x L)"
            if self.bias_per_block:
                return f"{blocked}, bias tiles per block (no L x L)"
            return f"{blocked}, one (H, L, L) bias per forward"
        return f"sdpa + {_short(dtype)} bias" + (" (learned)" if learned else "")

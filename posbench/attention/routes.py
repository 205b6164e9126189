"""The ways to attend with a bias, as small route objects, and ``choose_route``, which picks them
(the docs call them the attention plans; "route" keeps the word "plan" for the run plan).

A route's ``name`` is what a row records as ``info.attn_backend``; ``attend(q, k, v, window)`` attends
(``window``: the layer's sliding window, None for every earlier key; a plan is shared by the layers
of a forward, so the window comes with each call). docs/attention-plans.md describes each plan and why it
is chosen where it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import ClassVar, Protocol

import torch

from posbench.attention import flex
from posbench.attention.blocked import BLOCK_ROWS, blocked_bias_attention, compute_dtype
from posbench.attention.distance_op import distance_attention
from posbench.attention.form import BiasForm
from posbench.attention.linear import LINEAR_SPAN, linear_bias_sdpa
from posbench.attention.piecewise import PiecewiseRatio
from posbench.attention.tiles import BiasTiles, DenseBias, DistanceRow
from posbench.core.cpu_flash import flash_here
from posbench.core.masked import biased_attention, windowed

# Fewer queries than this: the masked bias; the square is small and one fused call beats a Python
# loop over blocks (docs/attention-plans.md).
BLOCKED_MIN_ROWS = 512
# What the linear plan runs on a CPU whose torch has the flash op with a mask (its backward by
# plain causal attention's rule, ``posbench.core.causal``).
LINEAR_BACKEND = (
    "sdpa flash causal + per-key slope mask (linear bias, no L x L; backward by 64-query blocks where SDPA's "
    "covers >= 75% of the square, L >= 512)"
)


class BiasSource(Protocol):
    """What a plan reads of a bias method (``posbench.attention.bias.BiasMethod``)."""

    def bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor: ...

    def masked_bias(self, q_pos: torch.Tensor, k_pos: torch.Tensor, dtype: torch.dtype) -> torch.Tensor: ...

    def parameters(self) -> Iterator[torch.Tensor]: ...


class Route:
    """One forward's way to attend. Subclasses: ``label`` (the name), ``__init__`` (what every layer
    shares: a row, pieces, a bias), ``attend``."""

    kind: ClassVar[str] = ""

    def __init__(self, source: BiasSource, form: BiasForm, q_pos, k_pos, dtype: torch.dtype):
        self.source, self.form, self.q_pos, self.k_pos, self.dtype = source, form, q_pos, k_pos, dtype

    @classmethod
    def label(cls, device, dtype: torch.dtype, form: BiasForm, learned: bool) -> str:
        raise NotImplementedError

    @property
    def name(self) -> str:
        return self.label(self.q_pos.device, self.dtype, self.form, learned(self.source))

    @classmethod
    def build(cls, source: BiasSource, form: BiasForm, q_pos, k_pos, dtype: torch.dtype):
        """What every layer of the forward attends with (a plan; ``MaskedRoute``: the masked bias)."""
        return cls(source, form, q_pos, k_pos, dtype)

    def attend(self, q, k, v, window: int | None = None) -> torch.Tensor:
        raise NotImplementedError


class MaskedRoute(Route):
    """The bias (H, Tq, Tk) with -inf on future keys, built once per forward: SDPA with it as the
    mask, or the explicit float32 path (a bias in another dtype than q; a learned bias on a CPU)."""

    kind = "masked"

    @classmethod
    def label(cls, device, dtype, form, learned):
        if form.dtype is not None and form.dtype != dtype:
            return "explicit float32 (B*H*L*L scores)"
        return f"sdpa + {str(dtype).removeprefix('torch.')} bias" + (" (learned)" if learned else "")

    @classmethod
    def build(cls, source, form, q_pos, k_pos, dtype) -> torch.Tensor:
        return source.masked_bias(q_pos, k_pos, dtype)


class LinearRoute(Route):
    """ALiBi's -m_h (p_i - p_j) as one number per head and key (``linear.py``), Tq == Tk."""

    kind = "linear"

    @classmethod
    def label(cls, device, dtype, form, learned):
        return LINEAR_BACKEND if flash_here(device) else "sdpa causal + slope column (linear bias, no L x L)"

    def attend(self, q, k, v, window=None):
        if windowed(k.shape[-2], window):
            # one number per key cannot say "older than the window": the bias tiles by block,
            # each block against the keys of its window only
            cdt = compute_dtype(q.dtype)
            source, inputs = position_tiles(self, cdt)
            return blocked_bias_attention(q, k, v, source, inputs, BLOCK_ROWS, window)
        return linear_bias_sdpa(q, k, v, self.form.slopes.to(q.device), self.k_pos)


class BlockedRoute(Route):
    """Attention by query blocks (``blocked.py``) with the tiles of ``tiles(tk, cdt)``."""

    what: ClassVar[str] = ""  # the end of the name: where the tiles come from

    @classmethod
    def label(cls, device, dtype, form, learned):
        return "blocked float32" + (" (flash op per block)" if flash_here(device) else "") + ", " + cls.what

    def tiles(self, tk: int, cdt: torch.dtype) -> tuple:
        """(tile source, the tensors its tiles depend on)."""
        raise NotImplementedError

    def attend(self, q, k, v, window=None):
        cdt = compute_dtype(q.dtype)
        source, inputs = self.tiles(k.shape[-2], cdt)
        return blocked_bias_attention(q, k, v, source, inputs, BLOCK_ROWS, window)


class DistanceRoute(BlockedRoute):
    """A bias of the distance alone at consecutive positions: every tile a view of one row."""

    kind, what = "distance", "distance row (no L x L)"

    def __init__(self, source, form, q_pos, k_pos, dtype):
        super().__init__(source, form, q_pos, k_pos, dtype)
        row = source.bias(k_pos[-1:], k_pos, dtype)  # (..., 1, Tk): the last query against every key
        self.row = row.reshape(-1, k_pos.shape[0])  # (h, Tk): row[t] is the bias at distance Tk - 1 - t

    def tiles(self, tk, cdt):
        return DistanceRow(self.row, tk, BLOCK_ROWS, cdt), (self.row,)

    def attend(self, q, k, v, window=None):
        if torch.compiler.is_compiling():  # one opaque op per layer: inductor slowed the traced loop down
            return distance_attention(q, k, v, self.row, BLOCK_ROWS, window)
        return super().attend(q, k, v, window)


class PiecewiseRoute(BlockedRoute):
    """A piecewise-linear bias of a ratio (``piecewise.py``): tiles from a row, a column, tables."""

    kind, what = "piecewise", "piecewise-linear bias tiles (no L x L)"

    def __init__(self, source, form, q_pos, k_pos, dtype):
        super().__init__(source, form, q_pos, k_pos, dtype)
        self.pieces = form.pieces(q_pos, k_pos)

    def tiles(self, tk, cdt):
        p = self.pieces
        return PiecewiseRatio(p, tk, BLOCK_ROWS, cdt), (p.row, p.z, p.slopes, p.intercepts)


class DenseRoute(BlockedRoute):
    """Any other bias: the masked (H, Tq, Tk) bias built once per forward, each tile a view."""

    kind, what = "dense", "one (H, L, L) bias per forward"

    def __init__(self, source, form, q_pos, k_pos, dtype):
        super().__init__(source, form, q_pos, k_pos, dtype)
        bias = source.masked_bias(q_pos, k_pos, dtype)
        self.bias = bias.reshape(-1, *bias.shape[-2:]).expand(-1, q_pos.shape[0], k_pos.shape[0])  # (h, Tq, Tk)

    def tiles(self, tk, cdt):
        return DenseBias(self.bias, cdt), (self.bias,)


class TilesRoute(BlockedRoute):
    """A bias cheap to build per block: each tile built from the block's positions in every layer."""

    kind, what = "tiles", "bias tiles per block (no L x L)"

    def tiles(self, tk, cdt):
        return position_tiles(self, cdt)


def position_tiles(plan: Route, cdt: torch.dtype) -> tuple:
    """(tile source, its inputs): each block's tile built from the block's positions by the
    plan's bias method, in every layer."""
    q_pos, k_pos, source, dtype = plan.q_pos, plan.k_pos, plan.source, plan.dtype

    def tile(r0: int, n: int, nk: int) -> torch.Tensor:  # (..., n, nk), future keys -inf
        return source.masked_bias(q_pos[r0 : r0 + n], k_pos[:nk], dtype)

    params = tuple(p for p in source.parameters() if p.requires_grad) if torch.is_grad_enabled() else ()
    return BiasTiles(tile, params, cdt), params


class FlexRoute(Route):
    """FlexAttention on CUDA (``flex.py``): the bias read inside the fused kernel through a
    ``score_mod`` made from the form (slopes, the bias of a distance computed per score, a distance
    row, else the bias by index)."""

    kind = "flex"

    @classmethod
    def label(cls, device, dtype, form, learned):
        what = (
            "linear score_mod (no L x L)"
            if form.slopes is not None
            else "of-distance score_mod (no L x L)"
            if form.of_distance is not None
            else "distance-row score_mod (no L x L)"
            if form.relative
            else "(H, L, L) bias score_mod"
        )
        return "flex_attention, " + what + (" (learned)" if learned else "")

    def __init__(self, source, form, q_pos, k_pos, dtype):
        super().__init__(source, form, q_pos, k_pos, dtype)
        tq = q_pos.shape[0]
        self.block_mask = flex.causal_block_mask(tq, k_pos.shape[0], str(q_pos.device))  # shared by the layers
        self.window_masks: dict[int, object] = {}  # a windowed layer's block mask, per window, made once
        if form.slopes is not None:
            self.score_mod = flex.linear_score_mod(form.slopes.to(q_pos.device), q_pos, k_pos)
        elif form.of_distance is not None and _consecutive(k_pos) and _last_of(q_pos, k_pos):
            self.score_mod = flex.of_distance_score_mod(form.of_distance, tq, k_pos.shape[0])
        elif form.relative and _consecutive(k_pos) and _last_of(q_pos, k_pos):
            row = source.bias(k_pos[-1:], k_pos, dtype)  # (..., 1, Tk): the last query against every key
            self.score_mod = flex.distance_score_mod(row.reshape(-1, k_pos.shape[0]), tq)
        else:
            bias = source.bias(q_pos, k_pos, dtype)  # (H or 1, Tq or 1, Tk): the block mask masks
            self.score_mod = flex.dense_score_mod(bias.reshape(-1, *bias.shape[-2:]))

    def attend(self, q, k, v, window=None):
        mask = self.block_mask
        if windowed(k.shape[-2], window):
            if window not in self.window_masks:
                self.window_masks[window] = flex.causal_block_mask(q.shape[-2], k.shape[-2], str(q.device), window)
            mask = self.window_masks[window]
        return flex.flex_attend(q, k, v, self.score_mod, mask)


def choose_route(device, dtype: torch.dtype, form: BiasForm, q_pos: torch.Tensor, k_pos: torch.Tensor) -> type[Route]:
    """The plan for attention on ``device`` in compute ``dtype`` at positions q_pos (Tq,), k_pos
    (Tk,), for a bias of ``form``. The first that applies: FlexAttention (CUDA with a torch that
    has it, at least ``FLEX_MIN_ROWS`` queries); the masked bias (not a CPU, or fewer
    than ``BLOCKED_MIN_ROWS`` queries); linear (float32 or float64, Tq == Tk, max slope x span
    at most ``LINEAR_SPAN``); distance, piecewise (consecutive integer positions); tiles; dense.
    Under torch.compile no position is read (see ``_consecutive``)."""
    tq, tk = q_pos.shape[0], k_pos.shape[0]
    if tq >= flex.FLEX_MIN_ROWS and flex.flex_available(device):
        return FlexRoute
    if torch.device(device).type != "cpu" or tq < BLOCKED_MIN_ROWS:
        return MaskedRoute
    consecutive = _consecutive(k_pos)
    if (
        form.slopes is not None
        and dtype in (torch.float32, torch.float64)
        and tq == tk
        and form.max_slope() * _span(k_pos, consecutive) <= LINEAR_SPAN
    ):
        return LinearRoute
    if form.relative and consecutive:
        return DistanceRoute
    if form.pieces is not None and consecutive:
        return PiecewiseRoute
    return TilesRoute if form.per_block else DenseRoute


def prepare(source: BiasSource, form: BiasForm, q_pos, k_pos, dtype: torch.dtype):
    """What every layer of a forward attends with: a plan, or the masked bias tensor."""
    return choose_route(q_pos.device, dtype, form, q_pos, k_pos).build(source, form, q_pos, k_pos, dtype)


def attend(q, k, v, prepared, window: int | None = None) -> torch.Tensor:
    """Causal attention with what ``prepare`` returned (or a masked bias tensor), each query
    within its last ``window`` keys when one is given."""
    if isinstance(prepared, Route):
        return prepared.attend(q, k, v, window)
    return biased_attention(q, k, v, prepared, window)


def training_name(source: BiasSource, form: BiasForm, device, dtype: torch.dtype) -> str:
    """The name of the plan a training forward at positions 0..L-1, L = ``BLOCKED_MIN_ROWS``,
    takes on ``device`` (what a row records; shorter inputs take the masked bias, as a GPU does)."""
    pos = torch.arange(BLOCKED_MIN_ROWS)
    return choose_route(device, dtype, form, pos, pos).label(device, dtype, form, learned(source))


def learned(source: BiasSource) -> bool:
    return any(p.requires_grad for p in source.parameters())


CONSECUTIVE_MESSAGE = (
    f"compiled bias attention with at least {BLOCKED_MIN_ROWS} queries on a CPU takes integer positions as "
    "consecutive (the model's default); allowed: p_0, p_0 + 1, ... or float positions"
)


def _span(k_pos: torch.Tensor, consecutive: bool) -> float:
    """p_last - p_0; under torch.compile known only for consecutive positions (else inf)."""
    if consecutive or k_pos.numel() < 2:
        return float(max(k_pos.numel() - 1, 0))
    if torch.compiler.is_compiling():
        return math.inf
    return float(k_pos[-1] - k_pos[0])


def _last_of(q_pos: torch.Tensor, k_pos: torch.Tensor) -> bool:
    """The queries are the last Tq keys' positions (a forward, or a prefill after a cache); under
    torch.compile taken so, as the model makes them, and checked when the graph runs."""
    if q_pos.is_floating_point():
        return False
    if torch.compiler.is_compiling():
        torch._assert_async((q_pos[-1] == k_pos[-1]) & (q_pos[-1] - q_pos[0] == q_pos.numel() - 1), CONSECUTIVE_MESSAGE)
        return True
    return int(q_pos[-1]) == int(k_pos[-1]) and int(q_pos[-1] - q_pos[0]) == q_pos.numel() - 1


def _consecutive(k_pos: torch.Tensor) -> bool:
    """Integer positions p_0, p_0 + 1, ..., (increasing, as the method contract requires)."""
    if k_pos.is_floating_point():
        return False
    if torch.compiler.is_compiling():
        # A graph cannot branch on a tensor's values (reading one breaks the graph, and every
        # layer after it runs eagerly): integer positions are taken as consecutive, as the model
        # makes them, and the graph checks it when it runs.
        torch._assert_async(k_pos[-1] - k_pos[0] == k_pos.numel() - 1, CONSECUTIVE_MESSAGE)
        return True
    return int(k_pos[-1] - k_pos[0]) == k_pos.numel() - 1

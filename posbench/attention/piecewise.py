"""A bias g_h(u(p_i - p_j) / z_i), g piecewise linear, formed tile by tile without an L x L tensor.

u is one (Tk,) row at consecutive integer positions, z one number per query row, g per-head slopes
and intercepts on pieces shared by the heads. FIRE is exactly this: its ReLU MLP of a scalar is
linear between its breakpoints (``relu_mlp_pieces``), so the pieces equal the MLP. Future keys
read u = ``PAD`` and land in a piece 0 of slope 0 and intercept -inf. docs/attention-plans.md derives the
tiles and their backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from posbench.attention.tiles import antidiagonal_sums

PAD = -1e30  # u of a future key: x = PAD / z <= -1e28 for any z in (0, 100): below FLOOR
FLOOR = -1e20  # the upper bound of piece 0 (the future keys')
CLAMP = 1e19  # breakpoints are clamped to +-CLAMP: x of a real key is finite and far inside


@dataclass
class RatioPieces:
    """The bias in pieces, for the piecewise plan (see the module docstring)."""

    row: torch.Tensor  # (Tk,): row[t] = u at distance Tk - 1 - t (the last query against key t)
    z: torch.Tensor  # (Tq,): the divisor of query row i, > 0
    breakpoints: torch.Tensor  # (W,) sorted ascending; piece p is (bp[p-1], bp[p]]
    slopes: torch.Tensor  # (H, W + 1): A, per head and piece
    intercepts: torch.Tensor  # (H, W + 1): B


def relu_mlp_pieces(w1, b1, w2, b2):
    """The pieces of x -> w2 relu(w1 x + b1) + b2 (w1, b1 (W,), w2 (H, W), b2 (H,)): sorted
    breakpoints (W,), slopes and intercepts (H, W + 1), differentiable in the four weights. Unit
    k is active above its breakpoint when w1_k > 0, below it when w1_k < 0."""
    with torch.no_grad():
        t = torch.where(w1 != 0, -b1 / torch.where(w1 != 0, w1, 1), CLAMP).clamp(-CLAMP, CLAMP)  # (W,)
        breakpoints, order = torch.sort(t)
        rank = torch.empty_like(order)
        rank[order] = torch.arange(order.numel(), device=order.device)
        above = torch.arange(order.numel() + 1, device=order.device)[:, None] > rank[None, :]  # (W + 1, W)
        active = torch.where(w1 > 0, above, torch.where(w1 < 0, ~above, (b1 > 0).expand_as(above)))
        m = active.to(w2.dtype).t()  # (W, W + 1)
    slopes = (w2 * w1) @ m  # (H, W + 1)
    intercepts = b2[:, None] + (w2 * b1) @ m
    return breakpoints, slopes, intercepts


class PiecewiseRatio:
    """The tiles of a ``RatioPieces`` bias, rows reversed as the other tile sources: reversed row
    i' of block r0..r0+n against key j reads u = ``row[Tk - nk + i' + j]`` (a strided view) and
    z = ``z[r0 + n - 1 - i']``. u grows with the distance, so the pieces are runs of keys: one
    ``searchsorted`` per forward gives each row's run ends, a tile's piece ids are their cumulative
    sum (no ``bucketize``). A key within rounding of a breakpoint may take the next piece: g is
    continuous there. Backward sums G and G x per piece from the same run ends."""

    def __init__(self, pieces: RatioPieces, tk: int, rows: int, dtype: torch.dtype):
        self.tk = tk
        row = pieces.row.detach().to(dtype)
        self.padded = torch.cat([row, row.new_full((rows - 1,), PAD)])  # (Tk + rows - 1,)
        self.z = pieces.z.detach().to(dtype)  # (Tq,)
        bp = pieces.breakpoints.detach().to(dtype).clamp(-CLAMP, CLAMP)  # (W,)
        # (Tq, W): how many distances d have u(d) <= t_k z_i (row.flip(0) is u by distance, ascending)
        self.below = torch.searchsorted(row.flip(0).contiguous(), self.z[:, None] * bp[None, :], right=True)
        a, b = pieces.slopes.detach().to(dtype), pieces.intercepts.detach().to(dtype)
        self.heads, self.width = a.shape[0], bp.shape[0]
        # (2H, W + 2): slopes over intercepts, piece 0 (the future keys: 0 x - inf) first; one
        # gather per tile reads both
        self.ab = torch.cat(
            [torch.cat([a.new_zeros(self.heads, 1), a], 1), torch.cat([b.new_full((self.heads, 1), float("-inf")), b], 1)]
        ).contiguous()

    def _ends(self, r0: int, n: int, nk: int) -> torch.Tensor:
        """(n, W + 1) run ends of the reversed rows, non-increasing: [keys before the future,
        then per breakpoint the keys with u > t_k z]; piece p holds keys ends[p] <= j < ends[p-1]."""
        real = torch.arange(nk, nk - n, -1, device=self.below.device)[:, None]  # (n, 1): d_max + 1 = nk - i'
        over = (real - self.below[r0 : r0 + n].flip(0)).clamp_(min=0)  # (n, W)
        return torch.cat([real, over], 1)

    def _tile(self, r0: int, n: int, nk: int) -> tuple[torch.Tensor, tuple]:
        """(the tile, (x, ends, A[seg]): what its backward uses)."""
        start = self.tk - nk
        u = self.padded[start : start + n + nk - 1].unfold(0, nk, 1)  # (n, nk), rows reversed: a view
        x = u / self.z[r0 : r0 + n].flip(0)[:, None]
        ends = self._ends(r0, n, nk)
        # piece id of key j: how many run ends exceed j = (W + 1) - how many are <= j
        steps = torch.zeros(n, nk + 1, dtype=torch.int32, device=x.device)
        steps.scatter_add_(1, ends, steps.new_full(ends.shape, -1))
        steps[:, 0] += self.width + 1
        seg = steps[:, :nk].cumsum(1, dtype=torch.int32).view(-1)  # (n * nk,) 0 for future keys
        ab = self.ab.index_select(1, seg).view(2, self.heads, n, nk)
        a = ab[0]
        return ab[1].addcmul_(a, x), (x, ends, a)  # (H, n, nk): B[seg] + A[seg] x

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        return self._tile(r0, n, nk)[0]

    def backward_tile(self, r0: int, n: int, nk: int) -> tuple[torch.Tensor, tuple]:
        return self._tile(r0, n, nk)

    def zero_grads(self) -> list[torch.Tensor]:
        """[row (Tk + rows - 1,), z (Tq,), ab (2H, W + 2)]: as ``padded``, ``z``, ``ab``."""
        return [torch.zeros_like(self.padded), torch.zeros_like(self.z), torch.zeros_like(self.ab)]

    def backward(self, r0: int, n: int, nk: int, g: torch.Tensor, saved: tuple, acc: list) -> None:
        """g (H, n, nk): the gradient of the tile (zero on future keys, whose probability is 0)."""
        x, ends, a = saved
        g_row, g_z, g_ab = acc
        h = self.heads
        du = (g * a).sum(0).div_(self.z[r0 : r0 + n].flip(0)[:, None])  # (n, nk): dL/dx / z = dL/du
        start = self.tk - nk
        g_row[start : start + n + nk - 1] += antidiagonal_sums(du[None])[0]
        g_z[r0 : r0 + n] -= (du * x).sum(-1).flip(0)  # dL/dz = -sum_j dL/dx x / z
        # Per piece p >= 1: sum over keys ends[p] <= j < ends[p-1] = prefix(ends[p-1]) - prefix(ends[p]),
        # prefix(e) the sum over j < e, read from an inclusive cumulative sum at e - 1.
        ends = torch.cat([ends, ends.new_zeros(n, 1)], 1)  # (n, W + 2): the last piece ends at key 0
        both = torch.empty(2, h, n, nk, dtype=g.dtype, device=g.device)  # [G x, G]: for A, for B
        torch.mul(g, x, out=both[0])
        both[1] = g
        at = (ends - 1).clamp_(min=0).expand(2 * h, -1, -1)
        prefix = both.view(2 * h, n, nk).cumsum(-1).gather(-1, at).mul_(ends > 0).sum(1)  # (2H, W + 2)
        g_ab[:, 1:] += prefix[:, :-1] - prefix[:, 1:]

    def grads(self, acc: list) -> tuple:
        g_row, g_z, g_ab = acc
        h = self.heads
        return g_row[: self.tk], g_z, g_ab[:h, 1:], g_ab[h:, 1:]

"""Where a block of the blocked path gets its bias tile (h, n, nk), rows reversed, future keys -inf.

Rows are reversed so a Toeplitz tile is a strided view with strides +1. Each source has ``tile``;
for backward ``backward_tile`` (the tile and what its gradient needs), ``zero_grads`` (the
accumulators), ``backward`` (adds one tile's gradient into them) and ``grads``. A source holds no
state that backward changes: under torch.compile an autograd function may not mutate an object
made outside it (dynamo breaks the graph there).
"""

from __future__ import annotations

import torch


class DistanceRow:
    """Tiles of a bias that depends on the distance between query and key only, from one row
    (h, Tk): ``row[t]`` is the bias at distance Tk - 1 - t. The future keys read -inf from a pad."""

    def __init__(self, row: torch.Tensor, tk: int, rows: int, dtype: torch.dtype):
        self.tk, self.rows = tk, rows
        pad = row.new_full((row.shape[0], rows - 1), float("-inf"), dtype=dtype)
        self.padded = torch.cat([row.detach().to(dtype), pad], 1)  # (h, Tk + rows - 1)

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        """(h, n, nk): the bias of query rows r0 .. r0+n (reversed) against keys 0 .. nk.
        Reversed row i', key j: distance nk - 1 - i' - j, i.e. ``row[Tk - nk + i' + j]``."""
        start = self.tk - nk  # unfold, not as_strided: a view torch.compile traces (no storage offset read)
        return self.padded[:, start : start + n + nk - 1].unfold(1, nk, 1)

    def backward_tile(self, r0: int, n: int, nk: int) -> tuple[torch.Tensor, None]:
        return self.tile(r0, n, nk), None  # backward reads the same view

    def zero_grads(self) -> list[torch.Tensor]:
        """[(h, rows, Tk + rows - 1)]: tile gradients added where their keys sit; the row's gradient
        is its anti-diagonal sums, taken once in ``grads`` (not once per block)."""
        h, width = self.padded.shape
        return [self.padded.new_zeros(h, self.rows, width)]

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor, saved, acc: list) -> None:
        start = self.tk - nk  # reversed row i', key j reads padded[start + i' + j]
        acc[0][:, :n, start : start + nk] += dtile

    def grads(self, acc: list) -> tuple:
        # element (i', t) of the accumulator belongs to padded[t + i']: shift row i' by i'
        return (antidiagonal_sums(acc[0])[:, : self.tk],)


class DenseBias:
    """Tiles sliced from a bias built once per forward (h, Tq, Tk), future keys -inf: any other
    bias. The square of the bias (and its gradient) is kept, once per forward; no layer's
    probabilities are."""

    def __init__(self, bias: torch.Tensor, dtype: torch.dtype):
        self.rev = bias.detach().to(dtype).flip(-2)  # (h, Tq, Tk), rows reversed once per call
        self.tq = bias.shape[1]

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        return self.rev[:, self.tq - r0 - n : self.tq - r0, :nk]  # rows r0+n-1 .. r0: a view

    def backward_tile(self, r0: int, n: int, nk: int) -> tuple[torch.Tensor, None]:
        return self.tile(r0, n, nk), None

    def zero_grads(self) -> list[torch.Tensor]:
        return [torch.zeros_like(self.rev)]

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor, saved, acc: list) -> None:
        acc[0][:, self.tq - r0 - n : self.tq - r0, :nk] += dtile

    def grads(self, acc: list) -> tuple:
        return (acc[0].flip(-2),)


class BiasTiles:
    """Tiles built by a callable ``tile_fn(r0, n, nk) -> (h, n, nk)`` (rows in order, future
    keys -inf) from ``inputs`` (the tensors it depends on: the method's parameters); backward
    builds each tile again under autograd and takes the inputs' gradients."""

    def __init__(self, tile_fn, inputs: tuple, dtype: torch.dtype):
        self.tile_fn, self.inputs, self.dtype = tile_fn, inputs, dtype

    def tile(self, r0: int, n: int, nk: int) -> torch.Tensor:
        t = self.tile_fn(r0, n, nk)
        return t.reshape(-1, *t.shape[-2:]).to(self.dtype).flip(-2)  # (h, n, nk), rows reversed

    def backward_tile(self, r0: int, n: int, nk: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The tile, built once under autograd: its values for the probabilities, its graph (saved)
        for ``backward``."""
        with torch.enable_grad():
            t = self.tile(r0, n, nk)
        return t.detach(), (t if t.requires_grad else None)

    def zero_grads(self) -> list[torch.Tensor | None]:
        return [None] * len(self.inputs)  # None until a tile's graph reaches the input

    def backward(self, r0: int, n: int, nk: int, dtile: torch.Tensor, saved, acc: list) -> None:
        wanted = [i for i, x in enumerate(self.inputs) if x.requires_grad]
        if saved is None or not wanted:
            return
        grads = torch.autograd.grad(
            saved, [self.inputs[i] for i in wanted], dtile.to(saved.dtype), allow_unused=True, retain_graph=True
        )  # a tile may share a graph with others (tests)
        for i, g in zip(wanted, grads):
            if g is not None:
                acc[i] = g if acc[i] is None else acc[i] + g

    def grads(self, acc: list) -> tuple:
        return tuple(acc)


# An opaque op for torch.compile, for the backward that is still traced (the piecewise plan's,
# fire): inductor lowered the skewed (overlapping) view and its sum, fused with DistanceRow's
# accumulator, to a loop that took 75 ms of a 174 ms compiled attention forward+backward at L 2048
# (4 heads of 32), where eager's strided sum takes a few; as an op it runs the same ATen calls
# compiled or not (docs/attention-plans.md, "Under torch.compile").
@torch.library.custom_op("posbench::antidiagonal_sums", mutates_args=())
def antidiagonal_sums(m: torch.Tensor) -> torch.Tensor:
    """(h, n, c) -> (h, n + c - 1): ``out[:, u] = sum over i + j = u of m[:, i, j]``, by a skewed
    view (row stride one less than the zero-padded buffer's) summed over the rows."""
    h, n, c = m.shape
    w = c + n - 1
    buf = m.new_empty(h, n, w)
    buf[:, :, : n - 1] = 0
    buf[:, :, n - 1 :] = m
    return buf.as_strided((h, n, w), (n * w, w - 1, 1), n - 1).sum(1)


@antidiagonal_sums.register_fake
def _(m: torch.Tensor) -> torch.Tensor:
    h, n, c = m.shape
    return m.new_empty(h, n + c - 1)

"""Causal attention with a bias of the distance alone, read per tile from a per-distance row inside
the fused Triton kernel (``fused_attention``'s ROW bias), and the plan that routes a bias method
there on CUDA: kerple_log, sandwich and any method of that form train without an L x L square.

The row is what the CPU's distance plan builds (``posbench/attention/routes.py``, ``DistanceRoute``):
(h, Tk), h 1 or H, row[t] the bias at distance Tk - 1 - t (the last query against every key).
A row that requires a gradient gets one (its per-distance sums of dScore). Design: docs/kernels.md.
"""

from __future__ import annotations

import torch

from posbench.attention.form import BiasForm
from posbench.attention.routes import Route
from posbench.core.masked import biased_attention, windowed
from posbench.triton_kernels import interpreter_on

# Fewer queries than this (a decode step, a short prompt): the plain plans; a kernel launch per
# layer buys nothing on a small square.
ROW_KERNEL_MIN_ROWS = 128


def _check_row(q, k, row) -> None:
    name = "distance_row_attention"
    if not isinstance(row, torch.Tensor):
        raise TypeError(f"{name}: row must be a torch.Tensor, got {type(row).__name__}")
    h, tk = q.shape[1], k.shape[2]
    if row.dim() != 2 or row.shape[0] not in (1, h) or row.shape[1] != tk:
        raise ValueError(f"{name}: row must have shape (1 or {h}, {tk}) (heads, keys), got {tuple(row.shape)}")
    if not row.is_floating_point():
        raise TypeError(f"{name}: row must be a float tensor, got {row.dtype}")
    if row.device != q.device:
        raise ValueError(f"{name}: row must be on q's device {q.device}, got {row.device}")


def distance_row_attention(
    q: torch.Tensor,  # (B, H, Tq, hd)
    k: torch.Tensor,  # (B, Hkv, Tk, hd), Hkv dividing H
    v: torch.Tensor,  # (B, Hkv, Tk, hd)
    row: torch.Tensor,  # (1 or H, Tk): row[t] the bias at distance Tk - 1 - t
    *,
    blocks_fwd: tuple[int, int, int, int] | None = None,
    blocks_bwd: tuple[int, int, int, int] | None = None,
) -> torch.Tensor:  # (B, H, Tq, hd), q's dtype
    """Causal softmax(q k^T / sqrt(hd) + row[h, Tk - 1 - (i_abs - j)]) v, fused, the queries the
    last Tq keys (i_abs = i + Tk - Tq); differentiable in q, k, v and, when it requires one, ``row``."""
    from posbench.triton_kernels.autograd import fused_attention
    from posbench.triton_kernels.bias_spec import ROW, ROW_LEARNED, BiasSpec
    from posbench.triton_kernels.checks import check_device, check_qkv

    check_qkv("distance_row_attention", q, k, v)
    _check_row(q, k, row)
    check_device("distance_row_attention", q)
    kind = ROW_LEARNED if row.requires_grad else ROW
    spec = BiasSpec(kind, row.to(torch.float32).contiguous())  # float32: the bias is added in float32
    return fused_attention(q, k, v, spec, blocks_fwd, blocks_bwd)


def row_kernel_available(device) -> bool:
    """Whether the fused row kernel runs on ``device``: a CUDA GPU and triton, not the interpreter."""
    if torch.device(device).type != "cuda" or interpreter_on() or not torch.cuda.is_available():
        return False
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def _row_positions(q_pos: torch.Tensor, k_pos: torch.Tensor) -> bool:
    """Consecutive integer key positions and the queries the last Tq of them: the row's layout.
    Under torch.compile no position is read: the compiled path keeps the plain plans."""
    if q_pos.is_floating_point() or k_pos.is_floating_point() or torch.compiler.is_compiling():
        return False
    tq, tk = q_pos.shape[0], k_pos.shape[0]
    return int(k_pos[-1] - k_pos[0]) == tk - 1 and int(q_pos[-1]) == int(k_pos[-1]) and int(q_pos[-1] - q_pos[0]) == tq - 1


class RowKernelRoute(Route):
    """The fused row kernel: the row built once a forward (float32, differentiable in the method's
    parameters), read per tile by every layer."""

    kind = "triton-row"

    @classmethod
    def label(cls, device, dtype, form, learned):
        return "triton fused, distance row in kernel (no L x L)" + (" (learned)" if learned else "")

    def __init__(self, source, form, q_pos, k_pos, dtype):
        super().__init__(source, form, q_pos, k_pos, dtype)
        row = source.bias(k_pos[-1:], k_pos, torch.float32)  # (..., 1, Tk): the last query against every key
        self.row = row.reshape(-1, k_pos.shape[0])  # (h, Tk)

    def attend(self, q, k, v, window=None):
        if windowed(k.shape[-2], window):  # the kernel masks by causality alone
            return biased_attention(q, k, v, self.source.masked_bias(self.q_pos, self.k_pos, q.dtype), window)
        return distance_row_attention(q, k, v, self.row)


class FusedDistanceRows:
    """Mixin for a ``BiasMethod`` whose bias is a function of the distance alone
    (``BiasForm(relative=True)``): where the row kernel runs, a forward of at least
    ``ROW_KERNEL_MIN_ROWS`` queries at consecutive positions attends through it; else the method's
    plans. List it before ``BiasMethod``: ``class KerpleLog(FusedDistanceRows, BiasMethod)``."""

    def _row_kernel_applies(self, form: BiasForm, q_pos, k_pos) -> bool:
        return (
            form.relative
            and q_pos.shape[0] >= ROW_KERNEL_MIN_ROWS
            and row_kernel_available(q_pos.device)
            and _row_positions(q_pos, k_pos)
        )

    def prepare(self, q_pos, k_pos, dtype):
        form = self.bias_form(dtype)
        if self._row_kernel_applies(form, q_pos, k_pos):
            return RowKernelRoute(self, form, q_pos, k_pos, dtype)
        return super().prepare(q_pos, k_pos, dtype)

    def attn_backend(self, device, dtype) -> str:
        if self.bias_form(dtype).relative and row_kernel_available(device):
            return RowKernelRoute.label(device, dtype, self.bias_form(dtype), any(p.requires_grad for p in self.parameters()))
        return super().attn_backend(device, dtype)

"""The blocked attention with a distance row (``DistanceRoute``) as opaque ops for torch.compile.

Traced, the blocked loop unrolls into one graph of 32 blocks per layer at L 2048, and inductor
rewrote its strided tile views and slice updates into loops of its own: the compiled training
step of t5_bias and kerple_log took 1.155-1.174x nope's at L 2048 against eager's 1.04
(docs/attention-plans.md, "Under torch.compile"). As ops, the graph holds one call per layer that runs the
eager code, so compiled and eager attend alike, with no graph break and a short compile.
"""

from __future__ import annotations

import torch

from posbench.attention.blocked import blocked_backward, blocked_forward, call_kind, compute_dtype, forward_only, scaled_queries
from posbench.attention.tiles import DistanceRow


def distance_attention(q, k, v, row, rows: int, window: int | None = None) -> torch.Tensor:
    """q (B, H, Tq, hd), k, v (B, H, Tk, hd), ``row`` (h, Tk) the bias at distance Tk - 1 - t ->
    (B, H, Tq, hd): ``blocked_bias_attention`` with a ``DistanceRow``, as one op in a graph."""
    window, train = call_kind(k, window, (q, k, v, row))
    if not train:
        return torch.ops.posbench.distance_attention_eval(q, k, v, row, rows, window)
    return torch.ops.posbench.distance_attention(q, k, v, row, rows, window)[0]


def _source(row: torch.Tensor, k: torch.Tensor, rows: int, q: torch.Tensor) -> DistanceRow:
    return DistanceRow(row, k.shape[-2], rows, compute_dtype(q.dtype))


@torch.library.custom_op("posbench::distance_attention_eval", mutates_args=())
def _eval(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: torch.Tensor, rows: int, window: int | None) -> torch.Tensor:
    with torch.autocast(q.device.type, enabled=False):
        return forward_only(q, k, v, _source(row, k, rows, q), rows, window)


@_eval.register_fake
def _(q, k, v, row, rows, window):
    return q.new_empty(*q.shape[:-1], v.shape[-1], dtype=v.dtype)


@torch.library.custom_op("posbench::distance_attention", mutates_args=())
def _train(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, row: torch.Tensor, rows: int, window: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (the output, and for backward: the output (B, H, Tq, hv) and its log-sum-exp (B, H, Tq),
    float32, rows reversed within blocks). The scaled queries and k, v are not returned (an op's
    output may not be its input): backward makes them again, one gather."""
    with torch.autocast(q.device.type, enabled=False):
        out, (_, _, _, out_rev, lse) = blocked_forward(q, k, v, _source(row, k, rows, q), rows, window)
    return out, out_rev, lse


@_train.register_fake
def _(q, k, v, row, rows, window):
    b, h, tq, _ = q.shape
    hv = v.shape[-1]
    return (
        q.new_empty(b, h, tq, hv, dtype=v.dtype),
        q.new_empty(b, h, tq, hv, dtype=compute_dtype(q.dtype)),
        q.new_empty(b, h, tq, dtype=compute_dtype(q.dtype)),
    )


@torch.library.custom_op("posbench::distance_attention_backward", mutates_args=())
def _train_backward(
    dout: torch.Tensor,
    saved: list[torch.Tensor],
    rows: int,
    window: int | None,
    row_grad: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``saved``: [q, k, v, row, out_rev, lse] as the forward saved them (one list: the op's schema
    takes a Tensor[]). -> (dq, dk, dv, the row's gradient (h, Tk) in its dtype; zeros without
    ``row_grad``)."""
    q, k, v, row, out_rev, lse = saved
    cdt = compute_dtype(q.dtype)
    with torch.autocast(q.device.type, enabled=False):
        saved = (scaled_queries(q, rows), k.to(cdt), v.to(cdt), out_rev, lse)  # as blocked_forward saved them
        dq, dk, dv, grads = blocked_backward(dout, saved, _source(row, k, rows, q), rows, window, row_grad)
    drow = grads[0].to(row.dtype).contiguous() if row_grad else torch.zeros_like(row)  # grads[0]: a view of a wider row
    return dq, dk, dv, drow


@_train_backward.register_fake
def _(dout, saved, rows, window, row_grad):
    q, k, v, row = saved[:4]
    return (dout.new_empty(q.shape), dout.new_empty(k.shape), dout.new_empty(v.shape), torch.empty_like(row))


def _setup_context(ctx, inputs, output):
    q, k, v, row, rows, window = inputs
    _, out_rev, lse = output
    ctx.mark_non_differentiable(out_rev, lse)
    ctx.rows, ctx.window = rows, window
    ctx.save_for_backward(q, k, v, row, out_rev, lse)


def _backward(ctx, dout, _d_out_rev, _d_lse):
    row_grad = ctx.needs_input_grad[3]
    dq, dk, dv, drow = torch.ops.posbench.distance_attention_backward(
        dout, list(ctx.saved_tensors), ctx.rows, ctx.window, row_grad
    )
    return dq, dk, dv, drow if row_grad else None, None, None


_train.register_autograd(_backward, setup_context=_setup_context)

"""Differentiable fused causal attention: ``fused_attention(q, k, v, spec)`` launches the kernels
(``kernels``) with the blocks ``tile_configs`` chooses, inside one ``torch.autograd.Function`` that
saves (q, k, v, o, lse) and recomputes the scores in the backward. Inputs are checked by the
callers (``checks``); the bias of a call is a ``bias_spec.BiasSpec``.
"""

from __future__ import annotations

import math

import torch
import triton

from posbench.triton_kernels import kernels
from posbench.triton_kernels.bias_spec import ROW_LEARNED, T5, BiasSpec
from posbench.triton_kernels.checks import INTERPRETED
from posbench.triton_kernels.tile_configs import choose_blocks, device_arch, length_key


def _strides(t: torch.Tensor) -> tuple[int, int, int, int]:
    return tuple(t.stride())


def _launch(kernel, tuned, blocks, grid_len, bh, args, consts):
    """Launch ``tuned`` (autotuned), or ``kernel`` with explicit ``blocks`` (BM, BN, warps, stages)."""
    if blocks is None:
        block = "BLOCK_M" if grid_len[1] == "m" else "BLOCK_N"
        tuned[lambda meta: (triton.cdiv(grid_len[0], meta[block]), bh)](*args, **consts)
        return
    block_m, block_n, warps, stages = blocks
    size = block_m if grid_len[1] == "m" else block_n
    kernel[(triton.cdiv(grid_len[0], size), bh)](
        *args, **consts, BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages
    )


class _FusedAttention(torch.autograd.Function):
    """Fused causal attention with an in-kernel bias; saves (q, k, v, o, lse), recomputes scores.
    k and v may hold fewer heads than q (grouped-query attention: query head h reads h // group)."""

    @staticmethod
    def forward(ctx, q, k, v, bias_tensor, key_bias, spec, blocks):
        # blocks: (fwd, dK/dV, dQ), each (BLOCK_M, BLOCK_N, warps, stages), or None to autotune it
        blocks_fwd, blocks_dkdv, blocks_dq = blocks
        b, h, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        o = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)  # (B, H, Tq, hd)
        lse = torch.empty((b * h, tq), dtype=torch.float32, device=q.device)  # log2 units
        sm_scale = 1.0 / math.sqrt(d)
        # (B, H, Tk) float32, contiguous: one row per program's (batch, head); without one the kernels
        # never read the pointer (KEY_BIAS off), so any float32 tensor stands in.
        kb = lse if key_bias is None else key_bias.detach().to(torch.float32).contiguous()
        args = (
            q,
            k,
            v,
            bias_tensor,
            kb,
            o,
            lse,
            *_strides(q),
            *_strides(k),
            *_strides(v),
            *_strides(o),
            *spec.strides(),
            h,
            h // hkv,
            tq,
            tk,
            spec.far_dist,
            length_key(tk),
            sm_scale,
            spec.pos_scale,
        )
        _launch(kernels.fwd_kernel, kernels.fwd_tuned, blocks_fwd, (tq, "m"), b * h, args, spec.consts(q.dtype, d))
        ctx.save_for_backward(q, k, v, bias_tensor, kb, o, lse)
        ctx.args = (spec, (blocks_dkdv, blocks_dq), sm_scale, key_bias is not None and key_bias.dtype)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, bias_tensor, kb, o, lse = ctx.saved_tensors
        spec, (blocks_dkdv, blocks_dq), sm_scale, kb_dtype = ctx.args
        b, h, tq, d = q.shape
        hkv, tk = k.shape[1], k.shape[2]
        if do.stride(-1) != 1:
            # Strided rows still read correctly (even stride 0 from .sum()), but a unit last
            # stride lets the GPU vectorise the loads of every dO tile.
            do = do.contiguous()
        delta = torch.empty_like(lse)  # (B*H, Tq) float32
        kernels.bwd_delta_kernel[(triton.cdiv(tq, 32), b * h)](
            o,
            do,
            delta,
            *_strides(o),
            *_strides(do),
            h,
            tq,
            HEAD_DIM=d,
            BLOCK_M=32,
        )
        dq = torch.empty((b, h, tq, d), dtype=q.dtype, device=q.device)
        dk = torch.empty((b, hkv, tk, d), dtype=k.dtype, device=k.device)  # summed over each group
        dv = torch.empty((b, hkv, tk, d), dtype=v.dtype, device=v.device)
        dkb = torch.empty((b, h, tk), dtype=torch.float32, device=q.device) if kb_dtype else delta
        consts = spec.consts(q.dtype, d)
        strides = (*_strides(q), *_strides(k), *_strides(v), *_strides(do), *spec.strides())
        shape = (h, tq, tk, spec.far_dist, length_key(tk))
        _launch(  # one program per key block and key/value head: no atomics, deterministic
            kernels.bwd_dkdv_kernel,
            kernels.dkdv_tuned,
            blocks_dkdv,
            (tk, "n"),
            b * hkv,
            (q, k, v, bias_tensor, kb, do, lse, delta, dk, dv, dkb, *strides, *shape, sm_scale, spec.pos_scale),
            {**consts, "GROUP": h // hkv},
        )
        # T5: one row of per-bucket partial sums per (batch*head, query block), sized for the
        # smallest BLOCK_M any config may use; rows a larger BLOCK_M leaves unwritten stay 0.
        min_block_m = blocks_dq[0] if blocks_dq else min(c.kwargs["BLOCK_M"] for c in kernels.dq_tuned.configs)
        dtab_blocks = triton.cdiv(tq, min_block_m) if spec.kind == T5 else 1
        if spec.kind == ROW_LEARNED:  # the row's gradient, laid out as the row: (1 or H, Tk)
            partial = torch.zeros_like(bias_tensor, dtype=torch.float32)
        else:
            partial = torch.zeros((b * h, dtab_blocks, spec.num_buckets), dtype=torch.float32, device=q.device)
        _launch(
            kernels.bwd_dq_kernel,
            kernels.dq_tuned,
            blocks_dq,
            (tq, "m"),
            b * h,
            (
                q,
                k,
                v,
                bias_tensor,
                kb,
                do,
                lse,
                delta,
                dq,
                partial,
                *strides,
                h,
                h // hkv,
                *shape[1:],
                dtab_blocks,
                sm_scale,
                spec.pos_scale,
            ),
            consts,
        )
        dbias = None
        if spec.kind == T5 and ctx.needs_input_grad[3]:
            # (B*H, blocks, buckets) -> (buckets, H): a fixed-order reduction, deterministic.
            dbias = partial.view(b, h, dtab_blocks, spec.num_buckets).sum(dim=(0, 2)).t().to(bias_tensor.dtype)
        if spec.kind == ROW_LEARNED and ctx.needs_input_grad[3]:
            dbias = partial.to(bias_tensor.dtype)
        dkey = dkb.to(kb_dtype) if kb_dtype and ctx.needs_input_grad[4] else None  # (B, H, Tk)
        return dq, dk, dv, dbias, dkey, None, None


def fused_attention(q, k, v, spec: BiasSpec, blocks_fwd=None, blocks_bwd=None, blocks_dq=None) -> torch.Tensor:
    """Differentiable fused causal attention with ``spec``'s bias (inputs already checked).
    ``blocks_*`` pin (BLOCK_M, BLOCK_N, warps, stages): ``blocks_bwd`` both backward kernels unless
    ``blocks_dq`` pins dQ's; what is not pinned comes from ``choose_blocks``."""
    arch = None if INTERPRETED else device_arch(q.device)
    name, d = spec.tuning_name(), q.shape[-1]
    blocks = (
        blocks_fwd or choose_blocks("fwd", arch, q.dtype, d, name),
        blocks_bwd or choose_blocks("dkdv", arch, q.dtype, d, name),
        blocks_dq or blocks_bwd or choose_blocks("dq", arch, q.dtype, d, name),
    )
    return _FusedAttention.apply(q, k, v, spec.tensor, spec.key_bias, spec, blocks)

"""The fused row kernel (a bias of the distance alone, read per tile from a per-distance row) against
plain PyTorch with the same bias materialised, the row's gradient included (TRITON_INTERPRET=1), and
the plan that routes kerple_log and sandwich there on CUDA, through a fake at the boundary.

Accuracy follows FlashAttention's rule as tests/triton_kernels/test_t5_attention.py does: against
float64, the kernel's error may be at most twice that of the same attention computed by PyTorch in
the input dtype, plus a small slack. Fresh seeds; the seed is in every failure message.
"""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("triton")

from posbench.core import registry  # noqa: E402
from posbench.core.method import ModelConfig, causal_mask  # noqa: E402
from posbench.triton_kernels import distance_rows as dr  # noqa: E402
from posbench.triton_kernels.checks import INTERPRETED  # noqa: E402
from tests.helpers.kernels import case_id, fresh_seed  # noqa: E402

if not INTERPRETED and not torch.cuda.is_available():
    pytest.skip("the row kernel needs a CUDA GPU or TRITON_INTERPRET=1", allow_module_level=True)

DEVICE = "cpu" if INTERPRETED else "cuda"
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def _reference(q, k, v, row):
    """Explicit attention in q's dtype: bias[h, i, j] = row[h, Tk - 1 - (i_abs - j)], causal."""
    tq, tk = q.shape[-2], k.shape[-2]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    i_abs = torch.arange(tk - tq, tk, device=q.device)
    index = (tk - 1 - (i_abs[:, None] - torch.arange(tk, device=q.device)[None, :])).clamp(max=tk - 1)  # (Tq, Tk)
    bias = row[:, index].to(q.dtype)  # (h, Tq, Tk)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    scores = scores.masked_fill(~causal_mask(tq, tk, q.device), float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)


def _fwd_bwd(fn, tensors, grad, dtype=None):
    leaves = [x.detach().to(dtype or x.dtype).requires_grad_() for x in tensors]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


# (B, H, Tq, Tk, head_dim, dtype): odd lengths, Tq < Tk, GQA (H 4 over Hkv 2), a row shared by heads
CASES = [
    (2, 3, 37, 37, 32, torch.float32),
    (1, 3, 21, 45, 32, torch.float16),
    (1, 4, 33, 33, 64, torch.float16),
]


@pytest.mark.parametrize("b,h,tq,tk,d,dtype", CASES, ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize("row_heads,kv_heads", [("H", "H"), ("1", "H"), ("H", "half")], ids=["per-head", "shared", "gqa"])
def test_row_kernel_matches_the_float64_reference_with_the_row_gradient(b, h, tq, tk, d, dtype, row_heads, kv_heads):
    seed = fresh_seed()
    hkv = h if kv_heads == "H" or h % 2 else h // 2
    q = torch.randn(b, h, tq, d, dtype=dtype, device=DEVICE)
    k, v = (torch.randn(b, hkv, tk, d, dtype=dtype, device=DEVICE) for _ in range(2))
    row = torch.randn(h if row_heads == "H" else 1, tk, device=DEVICE)  # float32, unit scale: the bias matters
    grad = torch.randn(b, h, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(dr.distance_row_attention, (q, k, v, row), grad)
    same = _fwd_bwd(_reference, (q, k, v, row), grad)
    exact = _fwd_bwd(_reference, (q, k, v, row), grad, torch.float64)
    for name, f, p, r in zip(("out", "dq", "dk", "dv", "drow"), fused, same, exact):
        err = (f.double() - r).abs().max().item()
        bound = 2 * (p.double() - r).abs().max().item() + ATOL[dtype] * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (seed {seed})"
    assert fused[4].shape == row.shape and fused[4].abs().sum() > 0, f"drow (seed {seed})"


def test_a_row_without_a_gradient_gets_none_and_bad_rows_are_one_line():
    q = torch.randn(1, 2, 16, 32, device=DEVICE, requires_grad=True)
    row = torch.randn(2, 16, device=DEVICE)
    dr.distance_row_attention(q, q.detach(), q.detach(), row).sum().backward()
    assert row.grad is None and q.grad is not None
    for bad, message in (
        (torch.zeros(3, 16), r"row must have shape \(1 or 2, 16\)"),
        (torch.zeros(2, 16, dtype=torch.long), "row must be a float tensor"),
        ([0.0], "row must be a torch.Tensor"),
    ):
        with pytest.raises((TypeError, ValueError), match=message) as info:
            dr.distance_row_attention(q, q, q, bad)
        assert str(info.value).startswith("distance_row_attention: ") and "\n" not in str(info.value)


@pytest.mark.parametrize("name", ["kerple_log", "sandwich"])
def test_distance_methods_take_the_row_kernel_where_it_runs_and_equal_their_plain_plans(name, monkeypatch):
    """The route through a fake at the CUDA boundary (``row_kernel_available`` true on this CPU,
    where the interpreter runs the kernel): the plan is named, the output and the method's
    parameter gradients (and dq, dk, dv) equal the plain (CPU distance) plan's; without the kernel, the plain plans."""
    seed = fresh_seed()
    cfg = ModelConfig(n_heads=2, d_model=64, n_layers=1, method=name)
    method = registry.build(cfg)
    pos = torch.arange(dr.ROW_KERNEL_MIN_ROWS)
    q, k, v = (torch.randn(1, 2, pos.shape[0], 32, requires_grad=True) for _ in range(3))
    assert not isinstance(method.prepare(pos, pos, torch.float32), dr.RowKernelRoute)  # no GPU: the plain plans

    def run():
        leaves = [q, k, v, *method.parameters()]  # kerple_log's r1, r2; sandwich has none
        for t in leaves:
            t.grad = None
        out = method.attend(q, k, v, pos, pos, 0, method.prepare(pos, pos, torch.float32))
        out.square().sum().backward()
        return out.detach(), [t.grad.clone() for t in leaves]

    plain_out, plain_grads = run()
    monkeypatch.setattr(dr, "row_kernel_available", lambda device: True)
    prepared = method.prepare(pos, pos, torch.float32)
    assert isinstance(prepared, dr.RowKernelRoute), type(prepared)
    assert method.attn_backend("cpu", torch.float32).startswith("triton fused, distance row in kernel (no L x L)")
    fused_out, fused_grads = run()
    assert (fused_out - plain_out).abs().max() < 1e-5, f"seed {seed}"
    for a, b in zip(fused_grads, plain_grads):
        # float32 sums in another order: the absolute error grows with the gradient's scale (seed
        # 3324674129: one of 8192 entries off by 1.05e-5 in a gradient of magnitude 5.3)
        scale = max(1.0, b.abs().max().item())
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5 * scale), f"seed {seed}"


@pytest.mark.parametrize("blocks", [(16, 32, 1, 1), (32, 16, 1, 1), (64, 16, 1, 1)], ids=["m16n32", "m32n16", "m64n16"])
def test_the_row_gradient_holds_for_tiles_taller_and_wider_than_square(blocks):
    """The dQ kernel sums the row's gradient per diagonal of a skewed tile: column c' of a tile
    holds (BM + BN - 2) // BN + 1 diagonals; tall, wide and square tiles, Tq < Tk, odd lengths."""
    seed = fresh_seed()
    q = torch.randn(1, 2, 45, 32, device=DEVICE)
    k, v = (torch.randn(1, 2, 71, 32, device=DEVICE) for _ in range(2))
    row = torch.randn(2, 71, device=DEVICE)
    grad = torch.randn(1, 2, 45, 32, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda *x: dr.distance_row_attention(*x, blocks_fwd=blocks, blocks_bwd=blocks), (q, k, v, row), grad)
    exact = _fwd_bwd(_reference, (q, k, v, row), grad, torch.float64)
    for name, f, r in zip(("out", "dq", "dk", "dv", "drow"), fused, exact):
        assert (f.double() - r).abs().max().item() < 1e-4 * max(1.0, r.abs().max().item()), f"{name} (seed {seed})"

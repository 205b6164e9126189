"""T5-Triton kernel and method against a float64 reference, dTable included (TRITON_INTERPRET=1).

Accuracy follows FlashAttention's test rule (Dao et al. 2022), as tests/triton_kernels/test_alibi_attention.py does:
against float64, the fused kernel's error (output, dQ, dK, dV and dTable) may be at most twice that
of the same attention computed by PyTorch in the input dtype, plus a small slack. Inputs are fresh
random numbers each run; the seed is in every failure message. Lengths past 128 + one tile put
"far" tiles (every distance in the last bucket, scalar bias) in the loops next to the near and
diagonal tiles; explicit block shapes move the boundaries between them.
"""

from __future__ import annotations

import math

import pytest
import torch

triton = pytest.importorskip("triton")

from posbench.core import registry
from posbench.core.method import ModelConfig, causal_mask  # noqa: E402
from posbench.triton_kernels import kernels  # noqa: E402
from posbench.triton_kernels import t5_attention as kt  # noqa: E402
from posbench.triton_kernels.bias_spec import far_distance  # noqa: E402
from tests.helpers.kernels import assert_fused_unavailable_rules  # noqa: E402
from tests.helpers.kernels import case_id as _case_id  # noqa: E402
from tests.helpers.kernels import fresh_seed as _seed
from tests.helpers.marks import slow_when_interpreted  # noqa: E402

if not kt.INTERPRETED and not torch.cuda.is_available():
    pytest.skip("T5-Triton needs a CUDA GPU or TRITON_INTERPRET=1", allow_module_level=True)

DEVICE = "cpu" if kt.INTERPRETED else "cuda"
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def relative_position_bucket(distance, num_buckets=32, max_distance=128):
    """t5_bias's own bucket function (methods/t5_bias.py), the definition the kernel must match."""
    return registry.get("t5_bias").__init__.__globals__["relative_position_bucket"](distance, num_buckets, max_distance)


def _reference(q, k, v, table, pos_scale=1.0):
    """Explicit attention in q's dtype: the T5 bias gathered to (H, Tq, Tk), causal mask, softmax."""
    tq, tk = q.shape[-2], k.shape[-2]
    k_pos = torch.arange(tk, device=q.device, dtype=torch.float32) * pos_scale
    distance = k_pos[tk - tq :][:, None] - k_pos[None, :]  # (Tq, Tk) floored by the bucket function
    ids = relative_position_bucket(distance if pos_scale != 1.0 else distance.long())
    bias = table.t()[:, ids].to(q.dtype)  # (H, Tq, Tk)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    scores = scores.masked_fill(~causal_mask(tq, tk, q.device), float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, Tq, hd)


def _fwd_bwd(fn, tensors, grad, dtype=None):
    """Output and the gradients of every tensor in ``tensors``, on copies cast to ``dtype``."""
    leaves = [x.detach().to(dtype or x.dtype).requires_grad_() for x in tensors]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


def _assert_fa_bound(fused, same, exact, dtype, seed):
    for name, f, p, r in zip(("out", "dq", "dk", "dv", "dtable"), fused, same, exact):
        err = (f.double() - r).abs().max().item()
        bound = 2 * (p.double() - r).abs().max().item() + ATOL[dtype] * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (seed {seed})"


def _inputs(b, h, tq, tk, d, dtype):
    q, k, v = (torch.randn(b, h, t, d, dtype=dtype, device=DEVICE) for t in (tq, tk, tk))
    table = torch.randn(32, h, dtype=dtype, device=DEVICE)  # (buckets, H), unit scale: the bias matters
    return q, k, v, table


# (B, H, Tq, Tk, head_dim, dtype): odd lengths, odd head counts, Tq < Tk, both interpreter dtypes.
CASES = [
    (1, 3, 1, 1, 32, torch.float32),
    (2, 5, 17, 17, 32, torch.float16),
    (1, 3, 40, 200, 32, torch.float32),  # far tiles (distance >= 128) in both query blocks
    (1, 4, 1, 300, 64, torch.float16),  # one decoding step against a KV cache
    (1, 3, 161, 161, 32, torch.float16),
]


@slow_when_interpreted
@pytest.mark.parametrize("b,h,tq,tk,d,dtype", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_float64_reference_with_dtable(b, h, tq, tk, d, dtype):
    seed = _seed()
    tensors = _inputs(b, h, tq, tk, d, dtype)
    grad = torch.randn(b, h, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(kt.t5_attention, tensors, grad)
    same = _fwd_bwd(_reference, tensors, grad)
    exact = _fwd_bwd(_reference, tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, dtype, seed)
    assert fused[4].dtype == tensors[3].dtype, f"dtable (seed {seed})"
    if tk > 1:  # the bias gets a gradient; with one key the softmax is 1 whatever the bias: exactly none
        assert fused[4].abs().sum() > 0, f"dtable (seed {seed})"
    else:
        assert exact[4].abs().max().item() == 0.0, f"dtable (seed {seed})"


@slow_when_interpreted
@pytest.mark.parametrize(
    "blocks,tq,tk,d",
    [((16, 32, 1, 1), 40, 170, 32), ((32, 16, 1, 1), 30, 200, 32), ((16, 16, 1, 1), 20, 160, 128)],
    ids=["m16n32", "m32n16-tq<tk", "m16n16-hd128"],
)
def test_block_shapes_and_head_dim_128(blocks, tq, tk, d):
    seed = _seed()
    tensors = _inputs(1, 3, tq, tk, d, torch.float32)
    grad = torch.randn(1, 3, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda *x: kt.t5_attention(*x, blocks_fwd=blocks, blocks_bwd=blocks), tensors, grad)
    same = _fwd_bwd(_reference, tensors, grad)
    exact = _fwd_bwd(_reference, tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, torch.float32, seed)


def test_position_scale_floors_like_t5_bias():
    """pos_scale 0.25 (interpolation) floors 0.25 * distance before bucketing, as t5_bias does."""
    seed = _seed()
    tensors = _inputs(1, 3, 30, 150, 32, torch.float32)
    grad = torch.randn(1, 3, 30, 32, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda *x: kt.t5_attention(*x, pos_scale=0.25), tensors, grad)
    same = _fwd_bwd(lambda *x: _reference(*x, pos_scale=0.25), tensors, grad)
    exact = _fwd_bwd(lambda *x: _reference(*x, pos_scale=0.25), tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, torch.float32, seed)


tl = triton.language


@triton.jit
def _bucket_probe(Out, n_dist, pos_scale, SCALED: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    row = tl.zeros((1,), tl.int32)  # one query at index 0 against keys -offs: distances offs
    bucket = kernels._bucket(row, -offs, pos_scale, SCALED, 32, 128)  # (1, BLOCK)
    tl.store(Out + offs, tl.reshape(bucket, (BLOCK,)), mask=offs < n_dist)


@pytest.mark.parametrize("pos_scale", [1.0, 0.25, 0.37, 3.0])
def test_in_kernel_bucket_equals_t5_bias_bucket_function(pos_scale):
    """The kernel's bucket of every distance 0..2047 equals relative_position_bucket's, and
    far_distance is the first distance from which every bucket is the last."""
    n = 2048
    out = torch.empty(n, dtype=torch.int32, device=DEVICE)
    _bucket_probe[(n // 256,)](out, n, pos_scale, SCALED=pos_scale != 1.0, BLOCK=256)
    distance = torch.arange(n, dtype=torch.float32, device=DEVICE) * torch.tensor(pos_scale, dtype=torch.float32)
    expected = relative_position_bucket(distance)
    assert torch.equal(out.long(), expected), (out.long() != expected).nonzero()[:5].tolist()
    far = far_distance(128, pos_scale)
    assert (expected[far:] == 31).all() and distance[far - 1].floor() < 128, far


@slow_when_interpreted
def test_dtable_is_deterministic():
    seed = _seed()
    tensors = _inputs(1, 2, 40, 170, 32, torch.float32)
    grad = torch.randn(1, 2, 40, 32, device=DEVICE)
    first = _fwd_bwd(kt.t5_attention, tensors, grad)
    second = _fwd_bwd(kt.t5_attention, tensors, grad)
    for name, a, b in zip(("out", "dq", "dk", "dv", "dtable"), first, second):
        assert torch.equal(a, b), f"{name} differs between two identical runs (seed {seed})"


def _bad_inputs():
    q = torch.zeros(1, 2, 8, 32, device=DEVICE)
    t = torch.zeros(32, 2, device=DEVICE)
    return [
        ("table shape", (q, q, q, torch.zeros(32, 3, device=DEVICE)), {}, r"table must have shape \(32, 2\)"),
        ("buckets", (q, q, q, torch.zeros(12, 2, device=DEVICE)), {"num_buckets": 12}, "power of two"),
        ("max distance", (q, q, q, t), {"max_distance": 16}, "max_distance must exceed"),
        ("pos_scale", (q, q, q, t), {"pos_scale": 0.0}, "pos_scale must be > 0"),
        ("Tq > Tk", (q, q[:, :, :4], q[:, :, :4], t), {}, "query length <= key length"),
        ("head_dim", (q[..., :16], q[..., :16], q[..., :16], t), {}, "head_dim 16 not supported"),
        ("table type", (q, q, q, [0.0]), {}, "table must be a torch.Tensor"),
    ]


@pytest.mark.parametrize("label,args,kwargs,message", _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_inputs_are_one_clear_line(label, args, kwargs, message):
    with pytest.raises((TypeError, ValueError, RuntimeError), match=message) as info:
        kt.t5_attention(*args, **kwargs)
    assert "\n" not in str(info.value) and str(info.value).startswith("t5_attention: ")


# ---------------------------------------------------------------------------------------------
# The registered method


def _method(name="t5_triton", **options):
    cfg = ModelConfig(n_heads=3, d_model=96, n_layers=2, method=name, method_options=options)
    return registry.build(cfg)


def test_method_equals_t5_bias_with_the_same_table():
    """Same state_dict, same outputs and table gradient as t5_bias (the unfused reference)."""
    seed = _seed()
    fused, plain = _method(), _method("t5_bias")
    with torch.no_grad():
        plain.table.weight.normal_()
    fused.load_state_dict(plain.state_dict())
    q, k, v = (torch.randn(1, 3, t, 32, device=DEVICE) for t in (30, 170, 170))
    pos = torch.arange(170, device=DEVICE)
    out_f = fused.attend(q, k, v, pos[140:], pos, layer=0)
    out_p = plain.attend(q, k, v, pos[140:], pos, layer=0)
    grad = torch.randn_like(out_f)
    out_f.backward(grad)
    out_p.backward(grad)
    assert (out_f - out_p).abs().max().item() < 1e-5, f"output (seed {seed})"
    err = (fused.table.weight.grad - plain.table.weight.grad).abs().max().item()
    assert err < 1e-4, f"dtable differs by {err:.3g} (seed {seed})"


def test_method_options_and_unavailable(monkeypatch):
    from posbench.core.registry import RegistryError

    assert _method(num_buckets=16, max_distance=64).num_buckets == 16
    with pytest.raises(ValueError, match="num_buckets must be a power of two"):
        _method(num_buckets=24)
    with pytest.raises(RegistryError, match="unknown option"):
        _method(bias_dtype="compute")
    assert_fused_unavailable_rules(type(_method()), monkeypatch)

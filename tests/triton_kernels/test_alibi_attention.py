"""ALiBi-Triton kernel and method against explicit-bias references (under TRITON_INTERPRET=1).

Accuracy follows FlashAttention's test rule (Dao et al. 2022): against a float64 reference, the
fused kernel's error may be at most twice that of the same attention computed by PyTorch in the
input dtype, plus a small absolute slack. Inputs are fresh random numbers each run; the seed is
printed in every failure message so a failure can be replayed.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")

from posbench.core.alibi_math import alibi_bias, slopes_tensor  # noqa: E402
from posbench.core.method import ModelConfig, causal_mask  # noqa: E402
from posbench.triton_kernels import alibi_attention as ka  # noqa: E402
from tests.helpers.kernels import assert_fused_unavailable_rules  # noqa: E402
from tests.helpers.kernels import case_id as _case_id  # noqa: E402
from tests.helpers.kernels import fresh_seed as _seed
from tests.helpers.marks import slow_when_interpreted  # noqa: E402

if not ka.INTERPRETED and not torch.cuda.is_available():
    pytest.skip("ALiBi-Triton needs a CUDA GPU or TRITON_INTERPRET=1", allow_module_level=True)

DEVICE = "cpu" if ka.INTERPRETED else "cuda"
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}


def _inputs(b, h, tq, tk, d, dtype):
    def make(t):
        return torch.randn(b, h, t, d, dtype=dtype, device=DEVICE, requires_grad=True)

    return make(tq), make(tk), make(tk)


def _reference(q, k, v, slopes, pos_scale=1.0, use_bias=True, bias_round=None):
    """Explicit attention in q's dtype: materialised ALiBi bias (H, Tq, Tk) plus causal mask."""
    tq, tk = q.shape[-2], k.shape[-2]
    k_pos = torch.arange(tk, dtype=torch.float64, device=q.device) * pos_scale
    bias = alibi_bias(slopes, k_pos[tk - tq :], k_pos)  # (H, Tq, Tk) float32
    if bias_round is not None:
        bias = bias.to(bias_round)
    bias = bias.to(q.dtype) if use_bias else torch.zeros_like(bias, dtype=q.dtype)
    bias = bias.masked_fill(~causal_mask(tq, tk, q.device), float("-inf"))
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1])) + bias
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, Tq, hd)


def _fwd_bwd(fn, q, k, v, grad, dtype=None):
    """Output and (dq, dk, dv) of fn on copies of q, k, v cast to ``dtype``."""
    leaves = [x.detach().to(dtype or x.dtype).requires_grad_() for x in (q, k, v)]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


def _assert_fa_bound(fused, torch_same_dtype, exact, dtype, seed, what=("out", "dq", "dk", "dv")):
    for name, f, p, r in zip(what, fused, torch_same_dtype, exact):
        err = (f.double() - r).abs().max().item()
        bound = 2 * (p.double() - r).abs().max().item() + ATOL[dtype]
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (seed {seed})"


# (B, H, Tq, Tk, head_dim, dtype): lengths 1..257, non-power-of-two heads, Tq < Tk, both dtypes,
# spread over few cases instead of a cartesian product (the interpreter is slow). ALiBi has no far
# tiles, so a few 32-row tiles cover its branches: full tiles below the diagonal, the masked
# diagonal, and last tiles of 1, 4, 9 or 17 rows (65, 100, 105, 17) or none (64).
CASES = [
    (1, 3, 1, 1, 32, torch.float32),
    (2, 5, 17, 17, 32, torch.float16),
    (1, 8, 64, 64, 64, torch.float32),
    (1, 3, 100, 100, 64, torch.float16),
    (2, 3, 65, 65, 32, torch.float32),
    (1, 5, 105, 105, 32, torch.float16),
    (1, 3, 1, 257, 64, torch.float32),  # one decoding step against a KV cache
    (2, 3, 17, 100, 32, torch.float16),
    (1, 5, 64, 129, 64, torch.float32),
]


@slow_when_interpreted
@pytest.mark.parametrize("b,h,tq,tk,d,dtype", CASES, ids=[_case_id(c) for c in CASES])
def test_matches_float64_reference(b, h, tq, tk, d, dtype):
    seed = _seed()
    q, k, v = _inputs(b, h, tq, tk, d, dtype)
    slopes = slopes_tensor(h, device=DEVICE)
    grad = torch.randn(b, h, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda *x: ka.alibi_attention(*x, slopes), q, k, v, grad)
    same = _fwd_bwd(lambda *x: _reference(*x, slopes), q, k, v, grad)
    exact = _fwd_bwd(lambda *x: _reference(*x, slopes), q, k, v, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, dtype, seed)


@slow_when_interpreted
@pytest.mark.parametrize(
    "blocks,tq,tk,d",
    [((16, 32, 1, 1), 70, 70, 32), ((32, 16, 1, 1), 40, 75, 32), ((16, 16, 1, 1), 33, 33, 128)],
    ids=["m16n32", "m32n16-tq<tk", "m16n16-hd128"],
)
def test_block_shapes_and_head_dim_128(blocks, tq, tk, d):
    seed = _seed()
    q, k, v = _inputs(1, 3, tq, tk, d, torch.float32)
    slopes = slopes_tensor(3, device=DEVICE)
    grad = torch.randn(1, 3, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda *x: ka.alibi_attention(*x, slopes, blocks_fwd=blocks, blocks_bwd=blocks), q, k, v, grad)
    same = _fwd_bwd(lambda *x: _reference(*x, slopes), q, k, v, grad)
    exact = _fwd_bwd(lambda *x: _reference(*x, slopes), q, k, v, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, torch.float32, seed)


@slow_when_interpreted
@pytest.mark.parametrize("tq,tk", [(64, 64), (20, 64)])
def test_zero_slopes_and_no_bias_equal_causal_sdpa(tq, tk):
    seed = _seed()
    q, k, v = _inputs(2, 3, tq, tk, 32, torch.float32)
    mask = None if tq == tk else causal_mask(tq, tk, DEVICE)

    def sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)

    grad = torch.randn(2, 3, tq, 32, dtype=torch.float64, device=DEVICE)
    zero = torch.zeros(3, device=DEVICE)
    exact = _fwd_bwd(sdpa, q, k, v, grad, torch.float64)
    same = _fwd_bwd(sdpa, q, k, v, grad)
    for kwargs, slopes in (({}, zero), ({"use_bias": False}, slopes_tensor(3, device=DEVICE))):
        fused = _fwd_bwd(lambda *x: ka.alibi_attention(*x, slopes, **kwargs), q, k, v, grad)
        _assert_fa_bound(fused, same, exact, torch.float32, seed)


def test_position_scale():
    """pos_scale multiplies positions (interpolation), as float positions do in the reference."""
    seed = _seed()
    q, k, v = _inputs(1, 5, 50, 90, 32, torch.float16)
    slopes = slopes_tensor(5, device=DEVICE)
    out = ka.alibi_attention(q, k, v, slopes, pos_scale=0.37).double()
    exact = _reference(*(x.double() for x in (q, k, v)), slopes, pos_scale=0.37)
    same = _reference(q, k, v, slopes, pos_scale=0.37).double()
    bound = 2 * (same - exact).abs().max().item() + ATOL[torch.float16]
    assert (out - exact).abs().max().item() <= bound, f"pos_scale (seed {seed})"


def test_compute_bias_dtype_rounds_the_bias():
    """bias_dtype="compute" adds the bias rounded to float16; "float32" adds it unrounded.

    A steep slope makes the bias large (|bias| up to ~930, float16 spacing 0.5 there), and keys
    built so that q.k/sqrt(d) cancels it keep every key's weight significant: the rounding then
    moves the output by far more than the kernel's own error.
    """
    seed = _seed()
    t, d, slope = 24, 32, 40.3
    q = torch.zeros(1, 1, t, d, dtype=torch.float16, device=DEVICE)
    q[..., 0] = 1.0
    k = torch.zeros_like(q)
    k[0, 0, :, 0] = -slope * math.sqrt(d) * torch.arange(t, dtype=torch.float32)  # q.k/sqrt(d) ~ -slope*j
    v = torch.randn_like(q)
    slopes = torch.tensor([slope], device=DEVICE)
    exact = _reference(*(x.double() for x in (q, k, v)), slopes)
    exact_rounded = _reference(*(x.double() for x in (q, k, v)), slopes, bias_round=torch.float16)
    gap = (exact - exact_rounded).abs().max().item()
    out = ka.alibi_attention(q, k, v, slopes).double()
    rounded = ka.alibi_attention(q, k, v, slopes, bias_dtype="compute").double()
    assert gap > 0.02, f"test inputs too weak: rounding moves the output by only {gap:.3g}"
    assert (out - exact).abs().max().item() < gap / 10, f"float32 bias (seed {seed})"
    assert (rounded - exact_rounded).abs().max().item() < gap / 10, f"compute bias (seed {seed})"


@slow_when_interpreted
def test_non_contiguous_inputs_and_output_gradient():
    """(B, T, H, hd) projections transposed to (B, H, T, hd) are read through their strides."""
    seed = _seed()
    b, t, h, d = 2, 40, 3, 32
    qkv = torch.randn(b, t, 3, h, d, device=DEVICE)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, T, hd), strided
    slopes = slopes_tensor(h, device=DEVICE)
    grad = torch.randn(b, t, h, d, dtype=torch.float64, device=DEVICE).transpose(1, 2)
    fused = _fwd_bwd(lambda *x: ka.alibi_attention(*x, slopes), q, k, v, grad)
    contiguous = _fwd_bwd(lambda *x: ka.alibi_attention(*x, slopes), *(x.contiguous() for x in (q, k, v)), grad)
    for name, a, c in zip(("out", "dq", "dk", "dv"), fused, contiguous):
        assert torch.equal(a, c), f"{name} depends on the input layout (seed {seed})"


def _bad_inputs():
    q = torch.zeros(1, 2, 8, 32, device=DEVICE)
    s = torch.zeros(2, device=DEVICE)
    return [
        (
            "head_dim 48",
            (torch.zeros(1, 2, 8, 48), torch.zeros(1, 2, 8, 48), torch.zeros(1, 2, 8, 48), s),
            "head_dim 48 not supported",
        ),
        ("dtype", (q.double(), q.double(), q.double(), s), "dtype torch.float64 not supported"),
        ("mixed dtypes", (q, q.half(), q, s), "must share one dtype"),
        ("3-D q", (q[0], q, q, s), r"q must be \(B, H, T, head_dim\)"),
        # 3 key/value heads for 2 query heads: grouped-query attention needs Hkv dividing H
        ("k heads", (q, torch.zeros(1, 3, 8, 32, device=DEVICE), torch.zeros(1, 3, 8, 32, device=DEVICE), s), "k and v must be"),
        ("Tq > Tk", (q, q[:, :, :4], q[:, :, :4], s), "query length <= key length"),
        ("slopes", (q, q, q, torch.zeros(3)), r"slopes must have shape \(2,\)"),
        ("bfloat16", (q.bfloat16(), q.bfloat16(), q.bfloat16(), s), "bfloat16"),
    ]


@pytest.mark.parametrize("label,args,message", _bad_inputs(), ids=[c[0] for c in _bad_inputs()])
def test_bad_inputs_are_one_clear_line(label, args, message):
    if label == "bfloat16" and not ka.INTERPRETED:
        pytest.skip("bfloat16 runs on the GPU")
    with pytest.raises((TypeError, ValueError, RuntimeError), match=message) as info:
        ka.alibi_attention(*args)
    assert "\n" not in str(info.value) and str(info.value).startswith("alibi_attention: ")


def test_bad_bias_dtype():
    q = torch.zeros(1, 2, 8, 32, device=DEVICE)
    with pytest.raises(ValueError, match="bias_dtype must be one of float32, compute"):
        ka.alibi_attention(q, q, q, torch.zeros(2, device=DEVICE), bias_dtype="float16")


# ---------------------------------------------------------------------------------------------
# The registered method


def _method(**options):
    from posbench.core import registry

    cfg = ModelConfig(n_heads=4, d_model=128, method="alibi_triton", method_options=options)
    return registry.build(cfg)


def test_method_with_float_positions_matches_reference():
    seed = _seed()
    m = _method()
    q, k, v = _inputs(1, 4, 10, 30, 32, torch.float32)
    k_pos = torch.arange(30, device=DEVICE) * 0.5  # interpolated positions
    out = m.attend(q, k, v, k_pos[20:], k_pos, layer=0)
    ref = _reference(*(x.double() for x in (q, k, v)), m._slopes_on(q.device), pos_scale=0.5)
    assert (out.double() - ref).abs().max().item() < 1e-5, f"seed {seed}"
    same = m.attend(q, k, v, torch.arange(20, 30, device=DEVICE), torch.arange(30, device=DEVICE), layer=1)
    assert not torch.allclose(out, same), "integer positions must use scale 1"


def test_method_options_and_unavailable(monkeypatch):
    from posbench.core.registry import RegistryError

    assert _method(bias_dtype="compute").bias_dtype == "compute"
    with pytest.raises(ValueError, match="bias_dtype must be one of"):
        _method(bias_dtype="half")
    with pytest.raises(RegistryError, match="unknown option"):
        _method(interpolate_scale=2.0)
    cls = type(_method())
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert cls.unavailable("cpu", torch.float16) is None
    assert_fused_unavailable_rules(cls, monkeypatch)


# ---------------------------------------------------------------------------------------------
# Tile configurations


def test_tile_configs_offered_per_target_and_length_key():
    from posbench.triton_kernels import kernels, tile_configs
    from posbench.triton_kernels.checks import HEAD_DIMS, INTERPRETED

    for kind in ("fwd", "bwd"):
        for arch in (80, 86, 89, 90):
            for dtype in (torch.float32, torch.bfloat16):
                for d in HEAD_DIMS:
                    chosen = tile_configs.configs_for(kind, arch, dtype, d)
                    assert chosen, (kind, arch, dtype, d)
                    target = 90 if arch >= 90 else 86 if arch > 80 else 80
                    fitting = [c for c in tile_configs.CONFIGS[kind] if c.allows(target, tile_configs.dtype_class(dtype), d)]
                    assert chosen == (fitting or [tile_configs.CONFIGS[kind][-1]])
    # the last config of each kernel is the fallback: it fits every target in half precision up to
    # d128 (the H100 benchmark case), and it is what float32 gets where no config fits: the
    # compile report measured spills for the float32 backward everywhere and the forward on sm_90
    for kind in ("fwd", "bwd"):
        last = tile_configs.CONFIGS[kind][-1]
        assert all(last.allows(a, "half", 128) for a in (90,)) and all(last.allows(a, "half", 32) for a in (80, 86)), last
    assert tile_configs.configs_for("bwd", 80, torch.float32, 32) == [tile_configs.CONFIGS["bwd"][-1]]
    assert not any(c.allows(90, "fp32", 32) for c in tile_configs.CONFIGS["fwd"])
    assert tile_configs.configs_for("fwd", 80, torch.float32, 32) == [tile_configs.CONFIGS["fwd"][-1]]  # fits sm_80
    assert [tile_configs.length_key(n) for n in (1, 2, 3, 1000, 1024, 1025)] == [1, 2, 4, 1024, 1024, 2048]
    assert INTERPRETED == (len(kernels.fwd_tuned.configs) == 1)


# ---------------------------------------------------------------------------------------------
# The compiled (GPU) path, checked without a GPU


@pytest.mark.subprocess
@pytest.mark.slow
def test_compile_report_every_config_fits_its_targets_on_sm80_and_sm90():
    """Interpreter tests cannot see GPU-only compile errors, register spills or shared memory
    overflows: compile every kernel (forward, dK/dV, dQ) in every autotune config, for sm_80 and
    sm_90, float32 and bfloat16, ALiBi and T5, at the largest head dim the config claims
    (posbench.triton_kernels.compile_report); each must spill nothing and fit the target's shared memory.
    The report (registers, spills, shared memory per config) is printed with -s."""
    import subprocess
    import sys

    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "posbench.triton_kernels.compile_report"],
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )
    if proc.returncode and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("triton's bundled ptxas is missing")
    print(proc.stdout)
    assert proc.returncode == 0 and "claims fit" in proc.stdout, (proc.stdout[-3000:], proc.stderr[-2000:])
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and "sm_" in line]
    targets = {line.split("|")[3].strip() for line in rows}
    assert targets == {"sm_80", "sm_90"}, targets

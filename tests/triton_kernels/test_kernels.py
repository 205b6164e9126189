"""The fused kernels' per-key bias (FoX's -F_j) and grouped-query attention, and the fox_triton
method, against plain PyTorch references (under TRITON_INTERPRET=1).

Accuracy follows FlashAttention's test rule as tests/triton_kernels/test_alibi_attention.py does: against
float64, the fused kernel's error (output, dQ, dK, dV and d key_bias) may be at most twice that of
the same attention computed by PyTorch in the input dtype, plus a small slack. Inputs are fresh
random numbers each run; the seed is in every failure message.
"""

from __future__ import annotations

import ast
import math
import os

import pytest
import torch
import torch.nn.functional as F

triton = pytest.importorskip("triton")

from posbench.core import registry  # noqa: E402
from posbench.core.alibi_math import slopes_tensor  # noqa: E402
from posbench.core.method import ModelConfig  # noqa: E402
from posbench.core.model import build_model  # noqa: E402
from posbench.protocols.generation import kv_cache_bytes  # noqa: E402
from posbench.triton_kernels import alibi_attention as ka  # noqa: E402
from posbench.triton_kernels import t5_attention as kt  # noqa: E402
from tests.helpers.kernels import assert_fused_unavailable_rules  # noqa: E402
from tests.helpers.kernels import case_id as _case_id  # noqa: E402
from tests.helpers.kernels import fresh_seed as _seed
from tests.helpers.marks import slow_when_interpreted  # noqa: E402

if not ka.INTERPRETED and not torch.cuda.is_available():
    pytest.skip("the fused kernels need a CUDA GPU or TRITON_INTERPRET=1", allow_module_level=True)

DEVICE = "cpu" if ka.INTERPRETED else "cuda"
ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}
WHAT = ("out", "dq", "dk", "dv", "dkey_bias")


def _forget_bias(b, h, tk, gate_bias=2.0):
    """-F_j, F = cumsum(log f) over keys 1..j in float32 with f = sigmoid(N(gate_bias, 1)): FoX's
    per-key term at its usual scale (|F| grows ~0.13 per key at gate_bias 2)."""
    log_f = F.logsigmoid(torch.randn(b, h, tk, device=DEVICE) + gate_bias)
    log_f[..., 0] = 0.0
    return -log_f.cumsum(-1)  # (B, H, Tk) float32


def _reference(q, k, v, key_bias=None, slopes=None, table=None):
    """Explicit attention in q's dtype: k, v expanded to q's heads (query head h reads h // group),
    the key bias (B, H, Tk), an ALiBi bias from ``slopes`` or T5's from ``table``, causal mask."""
    tq, tk = q.shape[-2], k.shape[-2]
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    i = torch.arange(tk - tq, tk, device=q.device)[:, None]
    j = torch.arange(tk, device=q.device)[None, :]
    if key_bias is not None:
        scores = scores + key_bias.to(q.dtype)[..., None, :]
    if slopes is not None:
        scores = scores + (slopes[:, None, None] * (j - i)).to(q.dtype)
    if table is not None:
        bucket = registry.get("t5_bias").__init__.__globals__["relative_position_bucket"](i - j)
        scores = scores + table.t()[:, bucket].to(q.dtype)
    scores = scores.masked_fill(j > i, float("-inf"))
    return torch.matmul(torch.softmax(scores, dim=-1), v)  # (B, H, Tq, hd)


def _fwd_bwd(fn, tensors, grad, dtype=None):
    """Output and the gradients of every tensor in ``tensors``, on copies cast to ``dtype``
    (the key bias stays float32 unless ``dtype`` is float64)."""
    leaves = [
        x.detach().to(dtype if dtype and (i < 3 or dtype == torch.float64) else x.dtype).requires_grad_()
        for i, x in enumerate(tensors)
    ]
    out = fn(*leaves)
    out.backward(grad.to(out.dtype))
    return [out.detach()] + [x.grad for x in leaves]


def _assert_fa_bound(fused, same, exact, dtype, seed, what=WHAT):
    for name, f, p, r in zip(what, fused, same, exact):
        assert f.shape == r.shape, f"{name}: shape {tuple(f.shape)}, want {tuple(r.shape)} (seed {seed})"
        err = (f.double() - r).abs().max().item()
        bound = 2 * (p.double() - r).abs().max().item() + ATOL[dtype] * max(1.0, r.abs().max().item())
        assert err <= bound, f"{name}: error {err:.3g} > bound {bound:.3g} (seed {seed})"


def _qkv(b, h, hkv, tq, tk, d, dtype):
    return [torch.randn(b, n, t, d, dtype=dtype, device=DEVICE) for n, t in ((h, tq), (hkv, tk), (hkv, tk))]


# (B, H, Tq, Tk, head_dim, dtype): odd lengths, odd head counts, Tq < Tk (a decode step, a
# chunk after cached keys), both interpreter dtypes.
CASES = [
    (1, 3, 1, 1, 32, torch.float32),
    (2, 3, 37, 37, 32, torch.float32),
    (2, 5, 17, 17, 32, torch.float16),
    (1, 3, 53, 101, 64, torch.float16),
    (1, 4, 1, 75, 32, torch.float32),  # one decoding step against a KV cache
    (1, 3, 97, 97, 32, torch.float16),  # 3 full tiles and 1 row (no far tiles without T5)
]


@slow_when_interpreted
@pytest.mark.parametrize("b,h,tq,tk,d,dtype", CASES, ids=[_case_id(c) for c in CASES])
def test_key_bias_and_its_gradient_match_the_reference(b, h, tq, tk, d, dtype):
    """FoX's -F_j added inside the kernel: output, dQ, dK, dV and d key_bias = sum_i dScore_ij."""
    seed = _seed()
    tensors = _qkv(b, h, h, tq, tk, d, dtype) + [_forget_bias(b, h, tk)]
    grad = torch.randn(b, h, tq, d, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda q, k, v, kb: ka.alibi_attention(q, k, v, None, key_bias=kb), tensors, grad)
    same = _fwd_bwd(_reference, tensors, grad, dtype)
    exact = _fwd_bwd(_reference, tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, dtype, seed)
    assert fused[4].dtype == torch.float32, f"d key_bias in the key bias's dtype (seed {seed})"
    if tk > 1:
        assert fused[4].abs().sum() > 0, f"d key_bias (seed {seed})"
    else:  # one key: its weight is 1 whatever the bias: no gradient (the kernel's within rounding, above)
        assert exact[4].abs().max().item() == 0.0, f"d key_bias (seed {seed})"


@slow_when_interpreted
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_key_bias_gradient_over_seeds_with_a_large_forget_span(seed):
    """Three fixed seeds, a float16 odd length and a strong decay (|F| up to ~100 at gate bias 0):
    the scores reach the scale where float32 rounding of -F_j would show."""
    torch.manual_seed(seed)
    tensors = _qkv(1, 3, 3, 45, 151, 32, torch.float16) + [_forget_bias(1, 3, 151, gate_bias=0.0)]
    grad = torch.randn(1, 3, 45, 32, dtype=torch.float64, device=DEVICE)
    fused = _fwd_bwd(lambda q, k, v, kb: ka.alibi_attention(q, k, v, None, key_bias=kb), tensors, grad)
    same = _fwd_bwd(_reference, tensors, grad, torch.float16)
    exact = _fwd_bwd(_reference, tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, torch.float16, seed)


@slow_when_interpreted
@pytest.mark.parametrize("blocks", [(16, 32, 1, 1), (32, 16, 1, 1)], ids=["m16n32", "m32n16"])
def test_key_bias_with_alibi_and_other_block_shapes(blocks):
    """The key bias adds to ALiBi's (any BIAS); tile shapes move the diagonal and key-length masks."""
    seed = _seed()
    h = 3
    tensors = _qkv(1, h, h, 30, 71, 32, torch.float32) + [_forget_bias(1, h, 71)]
    slopes = slopes_tensor(h, device=DEVICE)
    grad = torch.randn(1, h, 30, 32, dtype=torch.float64, device=DEVICE)

    def fused_fn(q, k, v, kb):
        return ka.alibi_attention(q, k, v, slopes, key_bias=kb, blocks_fwd=blocks, blocks_bwd=blocks)

    fused = _fwd_bwd(fused_fn, tensors, grad)
    same = _fwd_bwd(lambda *x: _reference(*x, slopes=slopes), tensors, grad, torch.float32)
    exact = _fwd_bwd(lambda *x: _reference(*x, slopes=slopes.double()), tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, torch.float32, seed)


@slow_when_interpreted
def test_key_bias_gradient_is_deterministic_and_absent_when_not_asked():
    seed = _seed()
    tensors = _qkv(1, 2, 2, 40, 70, 32, torch.float32) + [_forget_bias(1, 2, 70)]
    grad = torch.randn(1, 2, 40, 32, device=DEVICE)

    def fn(q, k, v, kb):
        return ka.alibi_attention(q, k, v, None, key_bias=kb)

    first, second = _fwd_bwd(fn, tensors, grad), _fwd_bwd(fn, tensors, grad)
    for name, a, b in zip(WHAT, first, second):
        assert torch.equal(a, b), f"{name} differs between two identical runs (seed {seed})"
    q, k, v = (x.requires_grad_() for x in tensors[:3])
    ka.alibi_attention(q, k, v, None, key_bias=tensors[3]).sum().backward()  # a key bias without grad
    assert tensors[3].grad is None and q.grad is not None


# ---------------------------------------------------------------------------------------------
# Grouped-query attention: k and v with Hkv < H heads, read in place


GQA_CASES = [(4, 2, 37, 37, torch.float32), (6, 2, 20, 45, torch.float16), (4, 1, 1, 33, torch.float32)]


@slow_when_interpreted
@pytest.mark.parametrize("h,hkv,tq,tk,dtype", GQA_CASES, ids=[f"H{c[0]}kv{c[1]}-q{c[2]}k{c[3]}" for c in GQA_CASES])
@pytest.mark.parametrize("kind", ["alibi", "alibi+key_bias", "t5"])
def test_grouped_kv_heads_match_the_expanded_reference(kind, h, hkv, tq, tk, dtype):
    """Query head h reads key/value head h // (H / Hkv); dK, dV are (B, Hkv, Tk, hd), each the sum
    over its group of query heads (what autograd gives the expanded reference)."""
    seed = _seed()
    tensors = _qkv(2, h, hkv, tq, tk, 32, dtype)
    grad = torch.randn(2, h, tq, 32, dtype=torch.float64, device=DEVICE)
    slopes = slopes_tensor(h, device=DEVICE)
    if kind == "t5":
        tensors.append(torch.randn(32, h, device=DEVICE))  # (buckets, H)
        fused = _fwd_bwd(kt.t5_attention, tensors, grad)
        ref = lambda q, k, v, table: _reference(q, k, v, table=table)  # noqa: E731
        what = WHAT[:4] + ("dtable",)
    elif kind == "alibi":
        fused = _fwd_bwd(lambda q, k, v: ka.alibi_attention(q, k, v, slopes), tensors, grad)
        ref = lambda q, k, v: _reference(q, k, v, slopes=slopes.to(q.dtype))  # noqa: E731
        what = WHAT[:4]
    else:
        tensors.append(_forget_bias(2, h, tk))
        fused = _fwd_bwd(lambda q, k, v, kb: ka.alibi_attention(q, k, v, slopes, key_bias=kb), tensors, grad)
        ref = lambda q, k, v, kb: _reference(q, k, v, kb, slopes=slopes.to(q.dtype))  # noqa: E731
        what = WHAT
    same = _fwd_bwd(ref, tensors, grad, dtype)
    exact = _fwd_bwd(ref, tensors, grad, torch.float64)
    _assert_fa_bound(fused, same, exact, dtype, seed, what)


def _bad_key_bias():
    q = torch.zeros(1, 2, 8, 32, device=DEVICE)
    k = torch.zeros(1, 2, 12, 32, device=DEVICE)
    return [
        ("shape", (q, k, k), torch.zeros(1, 2, 8, device=DEVICE), r"key_bias must have shape \(1, 2, 12\)"),
        ("kv heads", (q, k[:, :1], k[:, :1]), torch.zeros(1, 1, 12, device=DEVICE), r"key_bias must have shape \(1, 2, 12\)"),
        ("type", (q, k, k), [0.0] * 12, "key_bias must be a torch.Tensor"),
        ("dtype", (q, k, k), torch.zeros(1, 2, 12, dtype=torch.long, device=DEVICE), "key_bias must be a float tensor"),
        (
            "heads not dividing",
            (torch.zeros(1, 3, 8, 32, device=DEVICE), k, k),
            torch.zeros(1, 3, 12, device=DEVICE),
            "with Hkv dividing H = 3",
        ),
    ]


@pytest.mark.parametrize("label,qkv,key_bias,message", _bad_key_bias(), ids=[c[0] for c in _bad_key_bias()])
def test_bad_key_bias_and_head_counts_are_one_clear_line(label, qkv, key_bias, message):
    with pytest.raises((TypeError, ValueError), match=message) as info:
        ka.alibi_attention(*qkv, None, key_bias=key_bias)
    assert "\n" not in str(info.value) and str(info.value).startswith("alibi_attention: ")


# ---------------------------------------------------------------------------------------------
# The registered method, and the model's grouped-query layout for the fused-kernel methods


def _pair(name, other, **shape):
    """Two models with the same weights, one per method; learned position parameters scaled up
    as in the conformance kit, so a path that dropped them would show."""
    cfg = {**dict(vocab_size=64, n_layers=2, d_model=96, n_heads=3, d_ff=128, dropout=0.0), **shape}
    torch.manual_seed(0)
    a = build_model(ModelConfig(method=name, **cfg))
    with torch.no_grad():
        for p in a.method.parameters():
            p.normal_(0, 0.5)
    b = build_model(ModelConfig(method=other, **cfg))
    b.load_state_dict(a.state_dict())
    return a.to(DEVICE), b.to(DEVICE)


@slow_when_interpreted
def test_fox_triton_equals_fox_in_the_model_with_gate_gradients():
    """Same state_dict as fox (gate_w, gate_b); the model's loss and every gradient agree, the
    forget gates' included (they reach the gates through d key_bias)."""
    fused, plain = _pair("fox_triton", "fox")
    # fox_triton subclasses fox (compared by name: a test that reloads the methods makes a new class)
    assert type(fused.method).__mro__[1].name == "fox"
    idx = torch.randint(0, 64, (2, 41), device=DEVICE)
    for model in (fused, plain):
        model(idx).float().logsumexp(-1).mean().backward()
    grads = dict(plain.named_parameters())
    for name, p in fused.named_parameters():
        err = (p.grad - grads[name].grad).abs().max().item()
        assert err <= 1e-5 * max(1.0, grads[name].grad.abs().max().item()), f"{name}: gradient differs by {err:.3g}"
    assert fused.method.gate_w.grad.abs().sum() > 0


@slow_when_interpreted
def test_fox_triton_decodes_with_fox_cache_and_its_bytes():
    """KV-cache decode equals fox's full forward, and the cache holds what fox's holds: one extra
    float32 per cached key and head (the decode suite's kv_cache_bytes)."""
    fused, plain = _pair("fox_triton", "fox")
    idx = torch.randint(0, 64, (1, 20), device=DEVICE)
    with torch.no_grad():
        full = plain(idx)
        cache = fused.new_cache()
        parts = [fused(idx[:, :12], cache=cache)] + [fused(idx[:, t : t + 1], cache=cache) for t in range(12, 20)]
        plain_cache = plain.new_cache()
        plain(idx, cache=plain_cache)
    assert (torch.cat(parts, 1) - full).abs().max().item() < 1e-4
    # 2 layers x (keys hd + 1, values hd) x B 1 x H 3 x 20 keys x 4 bytes
    assert kv_cache_bytes(cache) == kv_cache_bytes(plain_cache) == 2 * (33 + 32) * 3 * 20 * 4


def test_fox_triton_is_fox_with_the_fused_kernels_rules(monkeypatch):
    m = registry.build(ModelConfig(n_heads=3, d_model=96, method="fox_triton", method_options={"gate_bias": 1.5}))
    assert float(m.gate_b[0, 0].detach()) == 1.5 and not m.grouped_kv  # the model expands shared heads for it
    assert m.attn_backend("cuda", torch.bfloat16) == "triton fused, forget-gate key bias in kernel (float32)"
    assert_fused_unavailable_rules(type(m), monkeypatch)


def test_fox_triton_takes_grouped_query_attention_like_fox():
    """n_kv_heads 2 of 4: each query head reads its own gate from its key head's columns in the
    expanded keys; the fused model's logits equal fox's."""
    fused, ref = _pair("fox_triton", "fox", d_model=128, n_heads=4, n_kv_heads=2)
    idx = torch.randint(0, 64, (2, 37), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    with torch.no_grad():
        torch.testing.assert_close(fused(idx), ref(idx), rtol=1e-4, atol=1e-4)


@slow_when_interpreted
@pytest.mark.parametrize("name,plain", [("alibi_triton", "alibi"), ("t5_triton", "t5_bias")])
def test_fused_methods_take_grouped_kv_heads_without_the_model_copy(monkeypatch, name, plain):
    """With n_kv_heads 2 of 4 the model hands the fused kernels k and v of 2 heads (no
    repeat_interleave), and the model equals the unfused method's, which takes the expanded copy."""
    fused, ref = _pair(name, plain, d_model=128, n_heads=4, n_kv_heads=2)
    assert fused.method.grouped_kv and not ref.method.grouped_kv
    seen = []
    attend = type(fused.method).attend

    def spy(self, q, k, v, *rest):
        seen.append((q.shape[1], k.shape[1], v.shape[1]))
        return attend(self, q, k, v, *rest)

    monkeypatch.setattr(type(fused.method), "attend", spy)
    idx = torch.randint(0, 64, (2, 35), device=DEVICE)
    with torch.no_grad():
        out, want = fused(idx), ref(idx)
    assert seen and set(seen) == {(4, 2, 2)}
    assert (out - want).abs().max().item() < 1e-4


@pytest.mark.subprocess
@pytest.mark.slow
def test_compile_report_variants_compile_the_key_bias_and_grouped_dkdv_for_the_gpu():
    """The compiled path the interpreter cannot see: the dK/dV kernel with FoX's key bias and 2
    query heads per key/value head compiles for sm_90 (compile_report --variants' job), with its
    registers and spills measured."""
    import subprocess
    import sys

    code = (
        "from posbench.triton_kernels import compile_report as cr; "
        "print(cr.compile_one(('dkdv', 1, 90, 'half', 32, 0, 'fox+gqa2')))"
    )
    env = {**os.environ, "TRITON_INTERPRET": "0", "TRITON_DEFAULT_FP_FUSION": "1"}
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600, cwd=root)
    if proc.returncode and "ptxas" in proc.stderr and "not found" in proc.stderr:
        pytest.skip("triton's bundled ptxas is missing")
    assert proc.returncode == 0, proc.stderr[-2000:]
    row = ast.literal_eval(proc.stdout.strip().splitlines()[-1])  # the dict compile_one returned
    assert row["bias"] == "none fox+gqa2" and row["registers"] > 0 and row["spill_bytes"] >= 0, row

"""FlexAttention for bias methods (posbench/attention/flex.py, ``routes.FlexRoute``; issue 43).

On this CPU torch runs FlexAttention's forward unfused: every bias method's forward through it
equals the masked-bias reference (fp32, odd lengths, Tq < Tk; bf16 within rounding). The CUDA
choice and the fallback are tested through fakes at the boundary (``flex_available``,
``torch.compile``); the backward and the compiled kernel run in ``make gpu-check``.
"""

from __future__ import annotations

import pytest
import torch

from posbench.attention import flex, routes
from posbench.attention.bias import BiasMethod
from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from tests.helpers.bias_plugins import PLUGINS

H, HD = 4, 8


def bias_methods() -> dict[str, type[BiasMethod]]:
    builtin = {n: c for n, c in registry.discover().items() if issubclass(c, BiasMethod)}
    return {**builtin, **PLUGINS}


def test_every_built_in_bias_method_is_covered():
    assert {"alibi", "t5_bias", "kerple_log", "fire"} <= set(bias_methods())


def _method(name: str, seed: int) -> BiasMethod:
    torch.manual_seed(seed)
    method = bias_methods()[name](ModelConfig(d_model=H * HD, n_heads=H, method=name))
    with torch.no_grad():  # learned parameters away from their initial values: a real bias
        for p in method.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return method


@pytest.mark.parametrize("name", sorted(bias_methods()))
@pytest.mark.parametrize("seed, tq, tk", [(0, 67, 67), (1, 130, 130), (2, 5, 13), (3, 129, 200)])
def test_the_flex_forward_equals_the_masked_reference(name, seed, tq, tk):
    method = _method(name, seed)
    q_pos, k_pos = torch.arange(tk - tq, tk), torch.arange(tk)
    q, k, v = torch.randn(2, H, tq, HD), torch.randn(2, H, tk, HD), torch.randn(2, H, tk, HD)
    form = method.bias_form(torch.float32)
    with torch.no_grad():  # FlexAttention has no backward on a CPU
        plan = routes.FlexRoute(method, form, q_pos, k_pos, torch.float32)
        ref = routes.attend(q, k, v, method.masked_bias(q_pos, k_pos, torch.float32))
        assert torch.allclose(plan.attend(q, k, v), ref, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("name", ["alibi", "t5_bias", "kerple_log", "fire", "wave_bias"])
def test_the_flex_forward_in_bfloat16_is_within_rounding_of_float32(name):
    method = _method(name, 4)
    pos = torch.arange(131)
    q, k, v = (torch.randn(1, H, 131, HD) for _ in range(3))
    with torch.no_grad():
        ref = routes.attend(q.double(), k.double(), v.double(), method.masked_bias(pos, pos, torch.float64))
        plan = routes.FlexRoute(method, method.bias_form(torch.bfloat16), pos, pos, torch.bfloat16)
        out = plan.attend(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16 and (out.double() - ref).abs().max() < 0.05


@pytest.mark.parametrize(
    "name, mod",
    [
        ("alibi", "linear"),
        ("t5_bias", "of-distance"),
        ("kerple_log", "distance-row"),
        ("fire", "(H, L, L) bias"),
        ("wave_bias", "(H, L, L) bias"),
    ],
)
def test_on_cuda_every_bias_method_takes_flex_and_names_it(name, mod, monkeypatch):
    from posbench.triton_kernels import distance_rows

    monkeypatch.setattr(flex, "flex_available", lambda device: torch.device(device).type == "cuda")
    # a GPU without triton: the distance methods' fused row kernel (tests/triton_kernels/test_distance_rows.py) is not there
    monkeypatch.setattr(distance_rows, "row_kernel_available", lambda device: False)
    method = _method(name, 0)
    backend = method.attn_backend("cuda", torch.bfloat16)
    assert backend.startswith(f"flex_attention, {mod} score_mod"), backend
    pos = torch.arange(flex.FLEX_MIN_ROWS)
    assert routes.choose_route("cuda", torch.bfloat16, method.bias_form(torch.bfloat16), pos, pos) is routes.FlexRoute
    # a decode step, or a prompt shorter than one Flex block: the small masked bias
    one = torch.arange(1)
    assert (
        routes.choose_route("cuda", torch.bfloat16, method.bias_form(torch.bfloat16), one + 9, torch.arange(10))
        is routes.MaskedRoute
    )
    # a CPU never takes it: its own plans are measured faster there (docs/attention-plans.md)
    assert routes.choose_route("cpu", torch.float32, method.bias_form(torch.float32), pos, pos) is not routes.FlexRoute


def test_without_flex_attention_cuda_falls_back_to_the_masked_bias(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_flex(name, globals=None, locals=None, fromlist=(), level=0):
        if name.startswith("torch.nn.attention") and ("flex_attention" in name or "flex_attention" in (fromlist or ())):
            raise ImportError("an old torch: no FlexAttention")
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_flex)
    assert not flex.flex_available("cuda")
    method = _method("t5_bias", 0)
    assert method.attn_backend("cuda", torch.bfloat16) == "sdpa + bfloat16 bias (learned)"


def test_flex_is_never_available_off_cuda():
    assert not flex.flex_available("cpu") and not flex.flex_available(torch.device("meta"))


def test_cuda_compiles_flex_attention_once_and_a_cpu_runs_it_eager(monkeypatch):
    from torch.nn.attention.flex_attention import flex_attention

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compiled.append((fn, kw)) or fn)
    flex.kernel.cache_clear()
    try:
        assert flex.kernel("cuda") is flex.kernel("cuda") and compiled == [(flex_attention, {"dynamic": False})]
        assert flex.kernel("cpu") is flex_attention and len(compiled) == 1
    finally:
        flex.kernel.cache_clear()


@pytest.mark.parametrize("name", ["alibi", "t5_bias", "fire"])
def test_a_model_forward_through_flex_equals_the_cpu_plans(name, monkeypatch):
    # The whole path (prepare -> plan -> every layer's attend) with the CUDA choice faked on a CPU.
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, method=name)
    model = build_model(cfg).eval()
    tokens = torch.randint(0, 50, (2, 150))
    with torch.no_grad():
        ref = model(tokens)
        monkeypatch.setattr(flex, "flex_available", lambda device: True)
        model.method._cache.clear()
        assert model.method.attn_backend("cpu", torch.float32).startswith("flex_attention")
        out = model(tokens)
    assert torch.allclose(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("seed, tq, tk", [(0, 130, 130), (1, 128, 201)])
def test_fox_through_flex_equals_its_reference(seed, tq, tk, monkeypatch):
    # FoX's bias depends on the input (forget gates), so it is no BiasMethod: on CUDA its attend
    # hands F_i - F_j to FlexAttention itself (methods/fox.py); the choice faked on this CPU.
    from methods.fox import fox_reference

    torch.manual_seed(seed)
    fox = registry.build(ModelConfig(d_model=H * HD, n_heads=H, n_layers=1, method="fox"))
    q, k, v = torch.randn(2, H, tq, HD), torch.randn(2, H, tk, HD), torch.randn(2, H, tk, HD)
    monkeypatch.setattr(flex, "flex_available", lambda device: True)
    assert fox.attn_backend("cuda", torch.bfloat16) == "flex_attention, forget-gate score_mod (no L x L)"
    with torch.no_grad():
        q16 = q.bfloat16()  # 16-bit: the CPU key-column plan does not apply, so Flex is taken
        out = fox.attend(q16, k.bfloat16(), v.bfloat16(), torch.arange(tk - tq, tk), torch.arange(tk), 0)
        log_f = fox.log_gate(k.bfloat16(), 0)
        log_f = torch.cat([torch.zeros_like(log_f[..., :1]), log_f[..., 1:]], -1)  # log f_0 := 0, as attend
        ref = fox_reference(q16.double(), k.bfloat16().double(), v.bfloat16().double(), log_f.double())
    assert (out.double() - ref).abs().max() < 0.03
    monkeypatch.setattr(flex, "flex_available", lambda device: False)
    assert fox.attn_backend("cuda", torch.bfloat16) == "explicit float32 (B*H*L*L scores, data-dependent bias)"


def test_t5_flex_computes_the_bucket_in_the_score_mod_and_builds_no_row(monkeypatch):
    """t5_bias's FlexRoute at consecutive positions reads only the (32, H) table: bias() (the row,
    the square) is never called, and the forward equals the masked reference past max_distance."""
    method = _method("t5_bias", 5)
    pos = torch.arange(200)

    def no_bias(*args, **kwargs):
        raise AssertionError("the plan built a bias row")

    with torch.no_grad():
        ref = routes.attend(*(qkv := [torch.randn(1, H, 200, HD) for _ in range(3)]), method.masked_bias(pos, pos, torch.float32))
        monkeypatch.setattr(method, "bias", no_bias)
        plan = routes.FlexRoute(method, method.bias_form(torch.float32), pos, pos, torch.float32)
        assert torch.allclose(plan.attend(*qkv), ref, atol=2e-6, rtol=1e-5)

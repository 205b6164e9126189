"""fox (Forgetting Transformer) against its paper's equations: hand-computed weights, the plain
reference on random inputs, both attention paths, the KV cache's extra float per key and head."""

import inspect
import math
import sys

import pytest
import torch

from posbench.core import registry
from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from posbench.protocols.generation import kv_cache_bytes
from tests.helpers.attention import qkv
from tests.helpers.graph_breaks import fresh_dynamo, fullgraph, trained_tiny_model  # noqa: F401  (autouse fixture)


def fox_module():
    return inspect.getmodule(registry.get("fox"))


def tiny_fox():
    """One layer, one head of dimension 2; gate f_t = sigmoid(k_t[0]) (w = [1, 0], b = 0)."""
    m = registry.build(ModelConfig(d_model=2, n_heads=1, n_layers=1, method="fox"))
    with torch.no_grad():
        m.gate_w.copy_(torch.tensor([[[1.0, 0.0]]]))
        m.gate_b.zero_()
    return m


def hand_inputs(dtype=torch.float32):
    # q = 0: the weights come from the bias alone. Gates: f_1 = sigmoid(0) = 1/2,
    # f_2 = sigmoid(ln 3) = 3/4 (f_0 never enters: bias_ij sums l = j+1..i).
    q = torch.zeros(1, 1, 3, 2, dtype=dtype)
    k = torch.tensor([[[[5.0, 0.0], [0.0, 0.0], [math.log(3), 0.0]]]], dtype=dtype)
    v = torch.tensor([[[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]]], dtype=dtype)
    return q, k, v


# Row 0: [1]                 -> v_0 = [1, 0]
# Row 1: exp(bias) = [f_1, 1] = [1/2, 1] -> weights [1/3, 2/3] -> [1/3, 2/3]
# Row 2: [f_1 f_2, f_2, 1] = [3/8, 3/4, 1] = [3, 6, 8] / 8 -> weights [3, 6, 8] / 17
#        -> 3/17 [1, 0] + 6/17 [0, 1] + 8/17 [1, 1] = [11/17, 14/17]
HAND = torch.tensor([[1.0, 0.0], [1 / 3, 2 / 3], [11 / 17, 14 / 17]])


def test_fox_weights_match_the_hand_computed_forget_gates():
    m = tiny_fox()
    q, k, v = hand_inputs()
    pos = torch.arange(3)
    out = m.attend(q, k, v, pos, pos, 0)  # Tq == Tk in float32 on a CPU: the key-column path
    torch.testing.assert_close(out[0, 0], HAND)
    # One decode step (Tq 1 after two cached keys: the dense bias path) gives row 2.
    torch.testing.assert_close(m.attend(q[:, :, 2:], k, v, pos[2:], pos, 0)[0, 0, 0], HAND[2])


def test_fox_log_gate_is_logsigmoid_of_the_keys_and_is_packed_into_the_cache():
    m = tiny_fox()
    _, k, _ = hand_inputs()
    log_f = m.log_gate(k, 0)[0, 0]
    torch.testing.assert_close(log_f, torch.tensor([math.log(1 / (1 + math.exp(-5))), math.log(0.5), math.log(0.75)]))
    fox = fox_module()
    for dtype, extra in ((torch.float32, 1), (torch.bfloat16, 2)):
        packed = fox.pack_log_gate(k.to(dtype), log_f[None, None])
        assert packed.shape[-1] == 2 + extra  # 4 bytes per key and head either way
        keys, back = fox.unpack_log_gate(packed, 2)
        assert torch.equal(keys, k.to(dtype)) and back.dtype == torch.float32
        torch.testing.assert_close(back[0, 0], log_f, rtol=0 if dtype == torch.float32 else 2e-5, atol=0)


@pytest.mark.parametrize("tq,tk", [(7, 7), (600, 600), (5, 11), (1, 9)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_fox_equals_the_plain_reference(tq, tk, dtype):
    m = registry.build(ModelConfig(d_model=64, n_heads=4, n_layers=2, method="fox")).to(dtype)
    with torch.no_grad():
        m.gate_w.normal_(0, 0.3)
        m.gate_b.normal_(2.0, 1.0)
    q, k, v = qkv(tq, tk, seed=tq, dtype=dtype)
    pos = torch.arange(tk)
    want = fox_module().fox_reference(q, k, v, m.log_gate(k, 1))
    got = m.attend(q, k, v, pos[tk - tq :], pos, 1)  # raw keys
    _, enc = m.encode_qk(q, k, 1, None)
    got_cached = m.attend(q, enc, v, pos[tk - tq :], pos, 1, None)  # keys as the cache holds them
    # float32's key column rounds each score at the magnitude of |F| (here up to ~100), as ALiBi's
    # linear plan rounds at m L: its bound, 1e-4 (tests/attention/test_blocked.py)
    tol = {torch.bfloat16: 2e-2, torch.float32: 1e-4, torch.float64: 1e-9}[dtype]
    torch.testing.assert_close(got.double(), want.double(), atol=tol, rtol=tol)
    torch.testing.assert_close(got_cached.double(), want.double(), atol=tol, rtol=tol)


def test_fox_key_column_path_gives_the_gates_their_gradient():
    m = registry.build(ModelConfig(d_model=64, n_heads=4, n_layers=1, method="fox")).double()
    q, k, v = qkv(6, 6, dtype=torch.float64)
    pos = torch.arange(6)
    m.attend(q, k, v, pos, pos, 0).sum().backward()
    got = m.gate_w.grad.clone()
    m.gate_w.grad = None
    fox_module().fox_reference(q, k, v, m.log_gate(k, 0)).sum().backward()
    torch.testing.assert_close(got, m.gate_w.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fox_kv_cache_holds_one_extra_float_per_key_and_head(dtype):
    """What the decode suite reports (kv_cache_bytes): nope's keys and values plus 4 bytes per
    cached key, head and layer."""
    idx = torch.randint(0, 64, (2, 10))
    sizes = {}
    for name in ("nope", "fox"):
        model = build_model(ModelConfig(vocab_size=64, n_layers=3, d_model=32, n_heads=4, method=name)).to(dtype)
        cache = model.new_cache()
        with torch.no_grad():
            model(idx, cache=cache)
        sizes[name] = kv_cache_bytes(cache)
    assert sizes["fox"] - sizes["nope"] == 3 * 2 * 4 * 10 * 4  # layers x batch x heads x keys x 4 bytes


def test_fox_bias_depends_on_the_input_not_on_positions():
    m = registry.build(ModelConfig(d_model=64, n_heads=4, n_layers=1, method="fox"))
    q, k, v = qkv(5, 5)
    pos = torch.arange(5)
    a = m.attend(q, k, v, pos, pos, 0)
    torch.testing.assert_close(m.attend(q, k, v, pos * 0.25, pos * 0.25, 0), a)  # interpolation: unchanged
    k2 = k.clone()
    k2[:, :, 2] += 1.0  # another gate at token 2 changes rows 2.. (its own score too) and never rows 0, 1
    b = m.attend(q, k2, v, pos, pos, 0)
    assert torch.equal(a[:, :, :2], b[:, :, :2]) and not torch.allclose(a[:, :, 3:], b[:, :, 3:])


def test_fox_rejects_a_bad_gate_bias():
    with pytest.raises(ValueError, match="fox: gate_bias must be a number"):
        registry.build(ModelConfig(method="fox", method_options={"gate_bias": "high"}))


def test_fox_names_the_attention_path_it_takes(monkeypatch):
    from posbench.attention import flex
    from posbench.core import cpu_flash

    m = registry.build(ModelConfig(method="fox"))
    assert m.attn_backend("cpu", torch.float32) == "cpu flash op + forget-gate key mask, blocked GEMM backward (no L x L)"
    monkeypatch.setattr(cpu_flash, "CPU_FLASH_WITH_MASK", None)  # a torch without the CPU flash op
    assert m.attn_backend("cpu", torch.float32) == "sdpa causal + forget-gate key column (no L x L)"
    assert m.attn_backend("cpu", torch.bfloat16).startswith("explicit float32")
    monkeypatch.setattr(flex, "flex_available", lambda device: torch.device(device).type == "cuda")
    assert m.attn_backend("cuda", torch.bfloat16) == "flex_attention, forget-gate score_mod (no L x L)"
    monkeypatch.setattr(flex, "flex_available", lambda device: False)  # a torch without FlexAttention
    assert m.attn_backend("cuda", torch.float32) == "sdpa + float32 (B, H, L, L) data-dependent bias"


@pytest.mark.parametrize("backend", ["eager", pytest.param("aot_eager", marks=pytest.mark.slow)])
@pytest.mark.parametrize("gate_bias, path", [(0.0, "_key_column"), (-30.0, "_gate_bias")])
def test_fox_traces_both_paths_and_matches_eager(gate_bias, path, backend):
    """|F| within LINEAR_SPAN takes the key column, beyond it the bias (at gate bias -30, |F| reaches
    ~30 x 127); the traced forward and gradients equal eager's on either path. ``aot_eager`` traces
    the backward too (torch.cond's aliasing and layout checks)."""
    model = trained_tiny_model("fox", 128, gate_bias=gate_bias)
    fox = sys.modules[type(model.method).__module__]
    taken = []

    def spy(name, fn):
        return lambda *a: taken.append(name) or fn(*a)

    x = torch.randint(0, 256, (2, 128))
    with pytest.MonkeyPatch.context() as mp:
        for name in ("_key_column", "_gate_bias"):
            mp.setattr(fox, name, spy(name, getattr(fox, name)))
        model(x)
    assert set(taken) == {path}

    def loss(x):
        return model(x).float().square().mean()

    params = list(model.method.parameters()) + [model.tok.weight]
    eager, traced = (torch.autograd.grad(f(x), params) for f in (loss, fullgraph(loss, backend)))
    for e, t in zip(eager, traced):
        torch.testing.assert_close(t, e, rtol=1e-4, atol=1e-6)
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(fullgraph(model, backend)(x), model(x), rtol=1e-5, atol=1e-5)

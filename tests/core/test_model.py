"""The base model every method shares (fairseq's transformer_lm, the ALiBi paper's): token scale,
the balance of position and token signal at initialisation, and the numeric care of the shared
attention helpers."""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.masked import explicit_attention, mask_bias
from posbench.core.method import ModelConfig
from posbench.core.model import build_model, model_config

CPU_METHODS = [m for m in registry.names() if registry.get(m).unavailable(torch.device("cpu"), torch.float32) is None]


def test_token_embeddings_enter_at_unit_scale():
    for preset in ("tiny", "small"):
        model = build_model(model_config(preset, "nope"))
        d = model.cfg.d_model
        assert model.cfg.token_scale == pytest.approx(math.sqrt(d))
        assert model.tok.weight.std().item() == pytest.approx(d**-0.5, rel=0.05)
        idx = torch.randint(0, model.cfg.vocab_size, (4, 64))
        x = model.tok(idx) * model.cfg.token_scale
        assert x.pow(2).mean().sqrt().item() == pytest.approx(1.0, rel=0.05)


def test_embed_scale_is_configurable_and_validated():
    assert ModelConfig(embed_scale=1.0).token_scale == 1.0
    with pytest.raises(ValueError, match="embed_scale must be a positive number"):
        ModelConfig(embed_scale=0)


@pytest.mark.parametrize("method", CPU_METHODS)
@pytest.mark.parametrize("preset", ["tiny", "small"])
def test_position_signal_below_token_signal_at_init(method, preset):
    """A method that adds to the embeddings must not drown the tokens (fairseq: ratio ~0.7 for
    sinusoidal); before the fix it was ~35 and two tokens at one position looked alike."""
    torch.manual_seed(0)
    model = build_model(model_config(preset, method))
    idx = torch.randint(0, model.cfg.vocab_size, (2, 512))
    x = model.tok(idx) * model.cfg.token_scale  # (B, T, D)
    with torch.no_grad():
        added = model.method.embed(x, model.positions(0, 512, "cpu")) - x
    ratio = added.pow(2).mean().sqrt().item() / x.pow(2).mean().sqrt().item()
    assert ratio < 1.0, f"{method}: position/token signal ratio {ratio:.2f} at init"
    if method == "sinusoidal":
        assert ratio == pytest.approx(math.sqrt(0.5), rel=0.05)  # sin/cos of amplitude 1: rms 1/sqrt(2)


def test_model_info_names_scale_and_attention_path(monkeypatch):
    from posbench.attention import flex

    model = build_model(model_config("tiny", "alibi"))
    info = model.info("cpu", torch.float32)
    assert info == {
        "embed_scale": "11.3137",
        "attn_backend": "sdpa flash causal + per-key slope mask (linear bias, no L x L)",
        "compute_dtype": "float32",
    }
    compute = build_model(model_config("tiny", "alibi", method_options={"bias_dtype": "compute"}))
    # a GPU with FlexAttention: the float32 bias as a linear score_mod; rounded to bf16, one row
    monkeypatch.setattr(flex, "flex_available", lambda device: torch.device(device).type == "cuda")
    assert model.info("cuda", torch.bfloat16)["attn_backend"] == "flex_attention, linear score_mod (no L x L)"
    assert compute.info("cuda", torch.bfloat16)["attn_backend"] == "flex_attention, distance-row score_mod (no L x L)"
    # without it: the masked bias
    monkeypatch.setattr(flex, "flex_available", lambda device: False)
    assert "explicit" in model.info("cuda", torch.bfloat16)["attn_backend"]
    assert compute.info("cuda", torch.bfloat16)["attn_backend"] == "sdpa + bfloat16 bias"


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("tq, tk", [(37, 37), (5, 41)])
def test_explicit_attention_takes_half_precision_products_in_float32(seed, tq, tk):
    """Large scores (|q.k|/sqrt(d) ~ 30) in bfloat16 round by ~0.1, which moves a softmax by a
    lot; the float32 product keeps the error at the inputs' own rounding."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, 64, generator=g) * 2.5 for n in (tq, tk, tk))
    q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    bias = mask_bias(-0.1 * torch.rand(3, tq, tk, generator=g))[None]  # (1, H, Tq, Tk) float32
    scores = q.double() @ k.double().transpose(-2, -1) / 8.0 + bias.double()
    want = torch.softmax(scores, dim=-1) @ v.double()
    err = (explicit_attention(q, k, v, bias).double() - want).abs().max().item()
    # The old way (product rounded to bfloat16 before the bias) is measurably worse here.
    rounded = (q @ k.transpose(-2, -1)).float() / 8.0 + bias
    old = (torch.softmax(rounded, dim=-1).bfloat16() @ v).double()
    old_err = (old - want).abs().max().item()
    assert err < 0.05 and err < old_err / 2, (err, old_err)


def test_the_model_takes_a_built_method_and_build_model_keeps_the_seeded_weights():
    """``TransformerLM(method)`` runs any built method, registered or not; ``build_model(cfg)``
    builds ``cfg.method`` by name and, under one seed, gives the same weights each time."""
    from posbench.core.model import TransformerLM

    cfg = model_config("tiny", "alibi", n_layers=1)
    model = TransformerLM(registry.build(cfg))
    assert model.cfg == cfg and model.method.cfg == cfg
    assert model(torch.zeros(1, 5, dtype=torch.long)).shape == (1, 5, cfg.vocab_size)
    torch.manual_seed(3)
    a = build_model(model_config("tiny", "kerple_log", n_layers=1))
    torch.manual_seed(3)
    b = build_model(model_config("tiny", "kerple_log", n_layers=1))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))

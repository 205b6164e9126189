"""ALiBi of BLOOM and MPT checkpoints: interpolated positions, the bias in float32 or in the model
dtype, and BLOOM's float32-bias attention against transformers' own."""

import pytest
import torch

from tests.helpers.hf_checkpoints import L_TRAIN, NEEDS_HF

pytest.importorskip("transformers", reason=NEEDS_HF)

from posbench.core.outcome import Unavailable  # noqa: E402
from posbench.engine.evaluate import positions  # noqa: E402
from posbench.hf.alibi import AlibiRecipe, _float32_bias_attention, model_slopes  # noqa: E402
from posbench.hf.checkpoint import load  # noqa: E402


@pytest.mark.parametrize("family", ["bloom", "mpt"])
def test_interpolated_positions_reach_the_bias(checkpoints, family):
    ckpt = load(f"hf:{checkpoints[family]}", torch.float32, "cpu")
    recipe = AlibiRecipe(ckpt.model, family, "alibi", {})
    Lv = 4 * L_TRAIN
    pos = positions(Lv, L_TRAIN)  # (Lv,) j * L_train / L_valid
    recipe.forward(torch.zeros(2, Lv, dtype=torch.long), pos)
    m = model_slopes(ckpt.model, family)  # (H,)
    want = m[:, None, None] * (pos if family == "bloom" else pos - pos[-1])[None, None, :]  # (H, 1, Lv)
    torch.testing.assert_close(recipe.last_bias, want, rtol=0, atol=0)
    assert float(recipe.last_bias.abs().max()) <= float(m.max()) * L_TRAIN  # squeezed into the trained range


def test_model_slopes_are_each_models_own(checkpoints):
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    ckpt = load(f"hf:{checkpoints['bloom']}", torch.float32, "cpu")
    ones = torch.ones(1, 3, dtype=torch.long)
    own = build_alibi_tensor(ones, 4, torch.float32)  # (H, 1, 3): m_h * [0, 1, 2]
    torch.testing.assert_close(model_slopes(ckpt.model, "bloom"), own[:, 0, 1])
    mpt = load(f"hf:{checkpoints['mpt']}", torch.float32, "cpu")
    assert torch.equal(model_slopes(mpt.model, "mpt"), 1 / 2 ** torch.arange(2.0, 9.0, 2.0))  # 8 / 4 heads: 2^-2k


@pytest.mark.parametrize("family", ["bloom", "mpt"])
def test_bias_dtype_float32_or_model_dtype(checkpoints, family):
    ckpt = load(f"hf:{checkpoints[family]}", torch.bfloat16, "cpu")
    ids = torch.randint(0, ckpt.vocab_size, (1, 300), generator=torch.Generator().manual_seed(0))
    compute = AlibiRecipe(ckpt.model, family, "alibi", {"bias_dtype": "compute"})
    out_compute = compute.forward(ids, None)
    assert compute.last_bias.dtype == torch.bfloat16
    ckpt = load(f"hf:{checkpoints[family]}", torch.bfloat16, "cpu")
    exact = AlibiRecipe(ckpt.model, family, "alibi", {"bias_dtype": "float32"})
    out_exact = exact.forward(ids, None)
    assert exact.last_bias.dtype == torch.float32
    # bfloat16 keeps 8 bits: far positions collapse onto fewer bias values (SambaNova's point)
    assert compute.last_bias.float().unique().numel() < exact.last_bias.unique().numel()
    assert not torch.equal(out_compute, out_exact)


def test_bloom_float32_bias_attention_equals_transformers_in_float32(checkpoints):
    ckpt = load(f"hf:{checkpoints['bloom']}", torch.float32, "cpu")
    ids = torch.randint(0, ckpt.vocab_size, (2, 50), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = ckpt.model(input_ids=ids).logits  # transformers' baddbmm attention
        for block in ckpt.model.transformer.h:
            block.self_attention.forward = _float32_bias_attention(block.self_attention)
        got = ckpt.model(input_ids=ids).logits
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_method_that_does_not_apply_is_unavailable_with_the_reason(checkpoints):
    ckpt = load(f"hf:{checkpoints['bloom']}", torch.float32, "cpu")
    with pytest.raises(Unavailable, match="rotary cannot be applied to an ALiBi checkpoint \\(bloom\\); allowed: alibi"):
        AlibiRecipe(ckpt.model, "bloom", "rotary", {})
    with pytest.raises(ValueError, match="allowed: bias_dtype float32 | compute"):
        AlibiRecipe(ckpt.model, "bloom", "alibi", {"bias_dtype": "float16"})

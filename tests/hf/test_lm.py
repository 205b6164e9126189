"""posbench's perplexity of a Hugging Face checkpoint equals the loss transformers computes on the
same windows (no scaling, float32), and every rotary recipe's frequencies equal posbench's."""

import math

import numpy as np
import pytest
import torch

from tests.helpers.hf_checkpoints import L_TRAIN, NEEDS_HF

pytest.importorskip("transformers", reason=NEEDS_HF)

from posbench.core import registry  # noqa: E402
from posbench.engine.evaluate import evaluate, window_plan  # noqa: E402
from posbench.hf.checkpoint import load  # noqa: E402
from posbench.hf.lm import PretrainedLM, recipe_for  # noqa: E402
from posbench.hf.rope import RECIPES, RopeRecipe  # noqa: E402

METHOD = {"llama": "rotary", "bloom": "alibi", "mpt": "alibi"}
HF_TYPE = {
    "rotary": "default",
    "rotary_pi": "linear",
    "rotary_ntk": "default",
    "rotary_dynamic_ntk": "dynamic",
    "rotary_yarn": "yarn",
    "rotary_llama3": "llama3",
    "rotary_longrope": "longrope",
}


def transformers_loss(model, tokens: np.ndarray, L: int, stride: int) -> float:
    """Mean loss over posbench's windows, each scored by transformers' own ``labels`` loss:
    L + 1 tokens in (the last only as a label), the targets a window does not score set to -100."""
    total, count = 0.0, 0
    for start, first in window_plan(len(tokens), L, stride):
        seq = torch.from_numpy(np.asarray(tokens[start : start + L + 1], dtype=np.int64))[None]  # (1, L+1)
        labels = seq.clone()
        labels[:, : first + 1] = -100  # input position j predicts label j + 1: scored from j = first
        with torch.no_grad():
            loss = model(input_ids=seq, labels=labels).loss
        n = L - int(first)
        total += float(loss) * n
        count += n
    return total / count


@pytest.mark.parametrize("family", ["llama", "bloom", "mpt"])
@pytest.mark.parametrize("mode", ["nonoverlapping", "sliding"])
def test_perplexity_equals_transformers_loss(checkpoints, family, mode):
    ckpt = load(f"hf:{checkpoints[family]}", torch.float32, "cpu")
    lm = PretrainedLM(ckpt, recipe_for(ckpt, METHOD[family], {}, L_TRAIN))
    tokens = np.random.default_rng(1).integers(0, ckpt.vocab_size, 203)
    # beyond L_train; MPT's own code has no bias past max_seq_len (32) keys, so it stays within
    L = 24 if family == "mpt" else 40
    stride = L if mode == "nonoverlapping" else 7
    r = evaluate(lm, tokens, L, mode=mode, stride=None if mode == "nonoverlapping" else stride, batch_size=3)
    untouched = load(f"hf:{checkpoints[family]}", torch.float32, "cpu").model  # transformers' own code, no recipe
    ref = transformers_loss(untouched, tokens, L, stride)
    assert r.n_tokens_scored == len(tokens) - 1
    assert abs(r.loss - ref) / ref <= 1e-5
    assert math.isclose(r.ppl, math.exp(ref), rel_tol=1e-5)


@pytest.mark.parametrize("method", RECIPES)
def test_each_rotary_recipe_gives_posbench_frequencies(checkpoints, method):
    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    recipe = RopeRecipe(ckpt.model, method, {}, L_TRAIN)
    own = registry.build(recipe.m.cfg)  # posbench's method with the same options, built anew
    for length in (L_TRAIN, 4 * L_TRAIN):
        recipe.forward(torch.zeros(1, length, dtype=torch.long), None)  # applies the recipe at this length
        rotary = ckpt.model.model.rotary_emb
        theta, factor = own.frequencies(length)  # (head_dim/2,) float64, attention factor
        assert ckpt.model.config.rope_parameters["rope_type"] == HF_TYPE[method]
        torch.testing.assert_close(rotary.inv_freq.double(), theta, rtol=1e-5, atol=0)
        assert math.isclose(rotary.attention_scaling, factor, rel_tol=1e-6)
        assert recipe.checks[length]["max_rel_freq_diff"] <= 1e-5
    scaled = not torch.allclose(own.frequencies(4 * L_TRAIN)[0], own.base_inv_freq())
    assert scaled == (method != "rotary")  # every scaling moves some frequency at 4 x L_train


def test_scaled_recipe_follows_the_length(checkpoints):
    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    check = RopeRecipe(ckpt.model, "rotary_yarn", {}, L_TRAIN).apply(8 * L_TRAIN)
    assert check["factor"] == 8.0 and math.isclose(check["attention_factor"], 0.1 * math.log(8) + 1)
    recipe = RopeRecipe(ckpt.model, "rotary_ntk", {"factor": 2.0}, L_TRAIN)
    recipe.apply(64)
    d = recipe.rotary_dim
    assert math.isclose(ckpt.model.config.rope_parameters["rope_theta"], 10000.0 * 2.0 ** (d / (d - 2)))


def test_frequencies_that_differ_from_posbench_are_an_error(checkpoints, monkeypatch):
    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    recipe = RopeRecipe(ckpt.model, "rotary_pi", {}, L_TRAIN)
    theta_of = type(recipe.m).frequencies
    monkeypatch.setattr(recipe.m, "frequencies", lambda length: (theta_of(recipe.m, length)[0] * 1.001, 1.0))
    with pytest.raises(RuntimeError, match="differs from posbench's rotary_pi"):
        recipe.apply(64)


def test_interpolated_positions_on_rope_equal_position_interpolation(checkpoints):
    """rotary at positions j * L_train / L_valid is rotary_pi at L_valid (factor L_valid / L_train):
    float positions reach the rotation, and every token still sees all the keys before it."""
    from posbench.engine.evaluate import positions

    ckpt = load(f"hf:{checkpoints['llama']}", torch.float32, "cpu")
    ids = torch.randint(0, ckpt.vocab_size, (2, 4 * L_TRAIN), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        interp = PretrainedLM(ckpt, recipe_for(ckpt, "rotary", {}, L_TRAIN))(ids, positions(4 * L_TRAIN, L_TRAIN))
        pi = PretrainedLM(ckpt, recipe_for(ckpt, "rotary_pi", {}, L_TRAIN))(ids, None)
        plain = PretrainedLM(ckpt, recipe_for(ckpt, "rotary", {}, L_TRAIN))(ids, None)
    torch.testing.assert_close(interp, pi, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(interp, plain, rtol=1e-5, atol=1e-5)

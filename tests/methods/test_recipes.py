"""The recipes rnope_swa, swan and irope (methods/recipes.py): their layout (a sliding window on the
RoPE layers, NoPE every 4th layer), the NoPE layers' temperatures computed by hand, KV-cache
decoding with the recipe's own window, and their listing apart from the other methods."""

import math

import pytest
import torch

from posbench.core import registry
from posbench.core.model import build_model, model_config
from posbench.core.outcome import Unavailable
from posbench.run import isolated


def model(name, n_layers=4, **options):
    torch.manual_seed(0)
    cfg = model_config("tiny", name, n_layers=n_layers, vocab_size=64, method_options=options)
    return build_model(cfg).eval()


@pytest.mark.parametrize(
    "name,window,base,temp", [("rnope_swa", 4096, 1e4, "none"), ("swan", 512, 1e4, "logn"), ("irope", 8192, 5e5, "llama4")]
)
def test_each_recipe_is_its_papers_layout(name, window, base, temp):
    m = model(name, n_layers=8)
    assert (m.cfg.window, m.cfg.window_layers) == (window, [0, 1, 2, 4, 5, 6])  # layers 3 and 7: NoPE, full attention
    assert [m.method.is_nope(i) for i in range(8)] == [False, False, False, True] * 2
    assert (m.method.rope.base, m.method.temp) == (base, temp)
    assert m.info("cpu", torch.float32)["window"] == f"{window} on layers [0, 1, 2, 4, 5, 6]"


def test_llama4_temperature_is_one_below_floor_scale_then_grows_with_log():
    m = model("irope").method
    pos = torch.tensor([0, 8190, 8191, 3 * 8192 - 1])
    want = torch.tensor([1.0, 1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(4)])
    torch.testing.assert_close(m.temperature(pos), want)


def test_logn_temperature_is_log_n_over_log_train_len_in_evaluation_only():
    m = model("swan").method
    m.train().prepare(torch.arange(64), torch.arange(64), torch.float32)  # records L_train = 64
    assert m.temperature(torch.tensor([255])) is None  # training: 1
    m.eval()
    torch.testing.assert_close(m.temperature(torch.tensor([10, 63, 255])), torch.tensor([1.0, 1.0, 4 / 3]))
    assert model("swan", train_len=16).method.temperature(torch.tensor([255])).item() == pytest.approx(2.0)


def test_nope_layers_scale_their_queries_by_the_temperature():
    m = model("irope").method
    q, k, v = (torch.randn(1, 4, 3, 16, generator=torch.Generator().manual_seed(s)) for s in range(3))
    pos = torch.tensor([8190, 8191, 16383])
    got = m.attend(q, k, v, pos, pos, 3)  # layer 3: NoPE
    scale = torch.tensor([1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(3)])  # floor((p + 1) / 8192) = 0, 1, 2
    torch.testing.assert_close(got, registry.build(model_config("tiny", "nope")).attend(q * scale[:, None], k, v, pos, pos, 3))


@pytest.mark.parametrize("name", ["rnope_swa", "swan", "irope"])
def test_decoding_with_the_recipes_window_equals_the_full_forward(name):
    m = model(name, window=5)
    idx = torch.randint(0, 64, (2, 14), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = m(idx)
        cache = m.new_cache()
        steps = [m(idx[:, :4], cache=cache)] + [m(idx[:, t : t + 1], cache=cache) for t in range(4, 14)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-4, rtol=1e-4)
    assert [k.shape[2] for k, _ in cache.layers()] == [5, 5, 5, 14]  # the RoPE layers hold their window


def test_a_model_window_beside_a_recipe_is_declined_in_one_line():
    with pytest.raises(
        Unavailable, match=r"^swan: a recipe sets its own sliding window .*; allowed: no model window with a recipe$"
    ):
        build_model(model_config("tiny", "swan", window=8))
    with pytest.raises(ValueError, match="irope: temp must be one of none, logn, llama4"):
        model("irope", temp="hot")


def test_recipes_are_listed_apart_and_are_methods():
    recipes = registry.recipes()
    assert list(recipes) == ["irope", "rnope_swa", "swan"] and all(o.endswith("methods/recipes.py") for o in recipes.values())
    assert set(recipes) <= set(registry.names())  # a suite lists them as methods
    assert isolated.listing()["recipes"] == recipes  # what `bench.py list` names in its header
    assert len(registry.names()) - len(recipes) >= 28 and len(registry.modifiers()) == 4

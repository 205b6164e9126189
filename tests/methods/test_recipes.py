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


def test_llama4_floor_scale_is_the_recipes_window_so_the_cpu_profile_sees_a_temperature():
    # the extrapolation suite's cpu profile: irope with window 16, L_train 64
    m = model("irope", window=16).method
    assert m.floor_scale == 16
    pos = torch.tensor([14, 15, 63])  # inside L_train 64
    want = torch.tensor([1.0, 1 + 0.1 * math.log(2), 1 + 0.1 * math.log(5)])
    torch.testing.assert_close(m.temperature(pos), want)
    assert m.temperature(pos)[-1] > 1
    # Llama 4's own number, asked for: 1 everywhere below position 8191
    assert torch.equal(model("irope", window=16, floor_scale=8192).method.temperature(pos), torch.ones(3))
    with pytest.raises(ValueError, match=r"^irope: floor_scale must be a positive integer or null \(the window\), got 0$"):
        model("irope", floor_scale=0)


def test_llama4_temperature_reaches_a_cpu_profile_forward():
    # a NoPE layer's output at L_train 64 differs from rnope_swa's (same weights, no temperature)
    irope, plain = model("irope", window=16, base=1e4), model("rnope_swa", window=16)
    idx = torch.randint(0, 64, (1, 64), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = irope(idx), plain(idx)
    assert torch.equal(a[:, :15], b[:, :15])  # temperature 1 before position 15
    assert (a[:, 15:] - b[:, 15:]).abs().max() > 1e-6  # small at initialisation (scores near 0), never 0


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


def test_swans_logn_scaling_reaches_the_evaluation_beyond_l_train():
    # issue 65: the extrapolation run read swan as rnope_swa. Through the real path (engine.train
    # records L_train, protocols.train_eval's eval_cell evaluates): the same trained weights score
    # the same at L_train with temp logn and none, and differently beyond it.
    from types import SimpleNamespace

    from posbench.engine.train import TrainConfig, train
    from posbench.protocols.train_eval.evaluations import EvalSpec, eval_cell

    m = model("swan", window=4)
    with torch.no_grad():  # a NoPE layer (3) that attends sharply, so its temperature shows
        m.blocks[3].qkv.weight[: m.cfg.d_model].mul_(20)
    tokens = torch.randint(0, 64, (4096,), generator=torch.Generator().manual_seed(2))
    train(m, iter([tokens[: 17 * 4].view(4, 17)] * 2), TrainConfig(seq_len=16, batch_size=4, steps=2, warmup_steps=1))
    assert m.method.trained_len.item() == 16
    s = SimpleNamespace(stride=16, eval_batch_size=8, eval_tokens=2048)
    loss = {}
    for temp in ("logn", "none"):
        m.method.temp = temp
        for lv in (16, 128):
            loss[temp, lv] = eval_cell(m, tokens.numpy(), EvalSpec("nonoverlapping", lv, 16), s, "cpu")[0]["loss"]
    assert loss["logn", 16] == loss["none", 16]
    assert abs(loss["logn", 128] - loss["none", 128]) > 1e-4  # 6.7e-4 here

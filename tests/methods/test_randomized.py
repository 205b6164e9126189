"""Randomized positions (methods/randomized.py): the draws, and the base method run at them."""

import pytest
import torch

from posbench.core.method import ModelConfig
from posbench.core.model import build_model
from tests.helpers.attention import method


def test_randomized_samples_an_ordered_subset_in_training_only():
    m = method("randomized", max_len=100)
    torch.manual_seed(0)
    draws = [m.sample(20, "cpu") for _ in range(50)]
    for d in draws:
        assert d.shape == (20,) and (d[1:] > d[:-1]).all() and d.min() >= 0 and d.max() < 100
    assert len({tuple(d.tolist()) for d in draws}) == 50  # random
    counts = torch.bincount(torch.cat(draws), minlength=100).double()
    assert counts.min() > 0 and counts.std() / counts.mean() < 0.5  # uniform over the range, not a prefix
    with pytest.raises(ValueError, match="randomized: a training sequence of 101 tokens is longer than max_len 100"):
        m.sample(101, "cpu")
    with pytest.raises(ValueError, match="randomized: base must be one of rotary, sinusoidal"):
        method("randomized", base="alibi")


@pytest.mark.parametrize("base", ["rotary", "sinusoidal"])
def test_randomized_uses_the_draw_in_every_layer_while_training(base):
    model = build_model(
        ModelConfig(d_model=64, n_heads=4, n_layers=3, method="randomized", method_options={"base": base, "max_len": 64})
    )
    m = model.method
    idx = torch.randint(0, 256, (2, 12))
    seen = []
    inner_embed, inner_attend = m.inner.embed, m.inner.attend
    m.inner.embed = lambda x, pos, state=None: seen.append(("embed", pos)) or inner_embed(x, pos, state)
    m.inner.attend = lambda q, k, v, qp, kp, layer, state=None: (
        seen.append((layer, qp, kp)) or inner_attend(q, k, v, qp, kp, layer, state)
    )
    torch.manual_seed(3)
    model.train()(idx)
    torch.manual_seed(3)
    expected = m.sample(12, "cpu")
    assert torch.equal(seen[0][1], expected) and not torch.equal(expected, torch.arange(12))
    for _, qp, kp in seen[1:]:
        assert torch.equal(qp, expected) and torch.equal(kp, expected)
    seen.clear()
    model.eval()(idx)
    assert torch.equal(seen[0][1], torch.arange(12))
    assert all(torch.equal(kp, torch.arange(12)) for _, _, kp in seen[1:])
    # The training forward equals the base method's at the drawn positions.
    plain = build_model(ModelConfig(d_model=64, n_heads=4, n_layers=3, method=base))
    plain.load_state_dict(model.state_dict(), strict=False)
    torch.manual_seed(3)
    model.train()
    out = model(idx)
    torch.testing.assert_close(out, plain.train()(idx, pos=expected))


def test_randomized_eval_positions_sampled_draws_in_evaluation_too():
    # The paper's protocol: evaluation draws positions as training does (one draw per forward);
    # a KV-cache decoding step would read another draw, so it is refused with one line.
    model = build_model(
        ModelConfig(
            d_model=32, n_heads=2, n_layers=2, method="randomized", method_options={"max_len": 64, "eval_positions": "sampled"}
        )
    ).eval()
    plain = build_model(ModelConfig(d_model=32, n_heads=2, n_layers=2, method="rotary"))
    plain.load_state_dict(model.state_dict(), strict=False)
    idx = torch.randint(0, 256, (2, 12))
    torch.manual_seed(5)
    out = model(idx)
    torch.manual_seed(5)
    drawn = model.method.sample(12, "cpu")
    assert not torch.equal(drawn, torch.arange(12))
    torch.testing.assert_close(out, plain.eval()(idx, pos=drawn))
    cache = model.new_cache()
    model(idx[:, :5], cache=cache)
    with pytest.raises(ValueError, match="randomized: eval_positions 'sampled' draws the positions of each full"):
        model(idx[:, 5:6], cache=cache)
    with pytest.raises(ValueError, match="randomized: eval_positions must be one of given, sampled, got 'random'"):
        method("randomized", eval_positions="random")
    with pytest.raises(ValueError, match="randomized: an evaluated sequence of 65 tokens is longer than max_len 64"):
        model(torch.randint(0, 256, (1, 65)))

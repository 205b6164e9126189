"""Attention probabilities read through the method's own attend (one-hot values), and the
diagnostics on models whose attention is known: zero queries and keys give uniform causal attention
under NoPE (entropy log n) and ALiBi's softmax of -m (i - j) under alibi; a probed forward leaves the
model as it was. Then a tiny extrapolation run with the diagnostics and its report tables."""

import math

import pytest
import torch

from posbench.core.alibi_math import alibi_slopes
from posbench.core.model import TransformerLM, build_model, model_config
from posbench.engine.attention_probe import attention_stats, diagnose, probed, uniform_entropy


def _blind(method: str) -> TransformerLM:
    """A model whose queries and keys are zero: its attention is the method's positions alone."""
    torch.manual_seed(0)
    model = build_model(model_config("tiny", method, n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=50)).eval()
    for blk in model.blocks:
        with torch.no_grad():
            blk.qkv.weight[:64].zero_()
            blk.qkv.bias[:64].zero_()
    return model


def test_uniform_attention_has_entropy_log_n_and_ratio_one():
    T = 24
    x = torch.randint(0, 50, (3, T))
    (first, second) = diagnose(_blind("nope"), x, [(1, 8), (9, 23)])
    for layer in (first, second):
        assert layer["entropy"] == pytest.approx([uniform_entropy(T)] * 4, rel=1e-6)
        assert layer["entropy_ratio"] == pytest.approx([1.0] * 4, rel=1e-6)
        share = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)  # query i gives each of its i + 1 keys 1 / (i + 1)
        assert layer["first_mass"] == pytest.approx([share] * 4, rel=1e-6)
        assert layer["mass_by_distance"]["0"] == pytest.approx([share] * 4, rel=1e-6)
        total = [sum(v[h] for v in layer["mass_by_distance"].values()) for h in range(4)]
        assert total == pytest.approx([1.0] * 4, rel=1e-6)


def test_alibi_probabilities_are_the_softmax_of_its_bias():
    T = 40  # more keys than head_dim (8): several one-hot blocks per layer
    model = _blind("alibi")
    with probed(model) as found:
        model(torch.randint(0, 50, (2, T)))
    assert len(found) == 2 and found[0].shape == (2, 4, T, T)
    dist = (torch.arange(T)[:, None] - torch.arange(T)[None, :]).double()
    for h, m in enumerate(alibi_slopes(4)):
        want = torch.softmax((-m * dist).masked_fill(dist < 0, -math.inf), dim=-1)
        assert torch.allclose(found[1][1, h].double(), want, atol=1e-5)


def test_a_probed_forward_changes_nothing():
    model = _blind("rotary")
    x = torch.randint(0, 50, (2, 16))
    before = model(x)
    own = model.method.__dict__.get("attend")
    with probed(model) as found:
        during = model(x)
    assert torch.equal(before, during) and len(found) == 2
    assert model.method.__dict__.get("attend") is own and torch.equal(model(x), before)


def test_mass_by_distance_splits_each_querys_mass():
    p = torch.zeros(1, 1, 4, 4)
    p[0, 0, 1, :2] = torch.tensor([0.25, 0.75])
    p[0, 0, 2, :3] = torch.tensor([0.5, 0.0, 0.5])
    p[0, 0, 3, :4] = torch.tensor([0.0, 1.0, 0.0, 0.0])
    s = attention_stats(p, [(1, 1), (2, 3)])
    # queries 1, 2, 3: mass on itself 0.75, 0.5, 0; at distance 1: 0.25, 0, 0; at 2-3: 0, 0.5, 1
    assert s["mass_by_distance"] == {
        "0": [pytest.approx(1.25 / 3)],
        "1-1": [pytest.approx(0.25 / 3)],
        "2-3": [pytest.approx(0.5)],
    }
    assert s["first_mass"] == [pytest.approx((0.25 + 0.5) / 3)]
    ent = [-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), math.log(2), 0.0]
    assert s["entropy"] == [pytest.approx(sum(ent) / 3)]
    assert s["entropy_ratio"] == [pytest.approx((ent[0] / math.log(2) + ent[1] / math.log(3)) / 3)]


def test_a_tiny_run_stores_and_charts_the_diagnostics(tmp_path):
    from posbench.protocols.attention_diagnostics import attention_chart, attention_tables
    from posbench.report.rows import load_runs
    from posbench.tasks import find as find_task
    from tests.helpers.cases import TINY, make_case
    from tests.helpers.report_rows import base_row, write_run

    settings = dict(TINY, attention_diagnostics=True, attention_sequences=2, attention_max_factor=2, modes=["nonoverlapping"])
    settings.update(interpolate=False, L_valid_factors=[1, 2, 4])
    task, case = make_case("extrapolation", "alibi", {"L_train": 8}, settings, tmp_path)
    out = task.run(case)
    entries = out["series"]["attention"]
    assert [(e["L_valid"], e["layer"]) for e in entries] == [(8, 0), (16, 0)]  # 1 layer; 4x is past the factor
    assert len(entries[0]["entropy"]) == 2 and set(entries[1]["mass_by_distance"]) == {"0", "1-8", "9-16"}
    assert out["metrics"]["attn_entropy_ratio@16"] == pytest.approx(sum(entries[1]["entropy_ratio"]) / 2)
    assert "attn_first_mass@32" not in out["metrics"]
    rows = [base_row("t", "extrapolation", m, {"L_train": 8}, "r", series={"attention": entries}) for m in ("alibi", "nope")]
    ratio, first, mass = attention_tables(load_runs(write_run(tmp_path / "results", rows), find_task=find_task), "extrapolation")
    assert ratio.columns == [8, 16] and ratio.cell("nope", 16).value == pytest.approx(out["metrics"]["attn_entropy_ratio@16"])
    assert first.cell("alibi", 8).value == pytest.approx(out["metrics"]["attn_first_mass@8"])
    assert mass.columns == ["0", "1-8", "9-16"] and sum(mass.cell("alibi", c).value for c in mass.columns) == pytest.approx(1.0)
    lines = {ln.get_gid(): ln for ln in attention_chart(ratio).axes[0].lines}
    assert list(lines["method:alibi"].get_xdata()) == [8, 16] and "L_train" in lines


# -- modifiers: the probe reads P where each acts ----------------------------------------------------


def _model(method: str, blind: bool = False, **options) -> TransformerLM:
    torch.manual_seed(0)
    cfg = model_config("tiny", method, n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=50, method_options=options)
    model = build_model(cfg).eval()
    if blind:
        for blk in model.blocks:
            with torch.no_grad():
                blk.qkv.weight[:64].zero_()
                blk.qkv.bias[:64].zero_()
    return model


def _probe(model: TransformerLM, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad(), probed(model) as found:
        model(x)
    return found


@pytest.mark.parametrize("method", ["rotary", "alibi"])
def test_a_gated_methods_attention_is_its_base_methods(method):
    """The gate scales the output after P v (from the values it reads): P is the base method's, each
    query's mass sums to 1 and the diagnostics are the base's, not a gate of one-hot values. (Layer 0
    only is compared: the gate changes what the next layer reads.)"""
    gated = _model(f"{method}+gate", out_gate_bias=2.0)
    base = _model(method)
    base.load_state_dict({k: v for k, v in gated.state_dict().items() if "out_gate" not in k})
    x = torch.randint(0, 50, (2, 20))
    found = _probe(gated, x)
    assert torch.allclose(found[0], _probe(base, x)[0], atol=1e-6)
    for p in found:
        assert torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-5)
    layers, want = diagnose(gated, x, [(1, 8), (9, 19)]), diagnose(base, x, [(1, 8), (9, 19)])[0]
    for layer in layers:
        assert [sum(m[h] for m in layer["mass_by_distance"].values()) for h in range(4)] == pytest.approx([1.0] * 4)
    for key in ("entropy", "entropy_ratio", "first_mass"):
        assert layers[0][key] == pytest.approx(want[key], abs=1e-6)


@pytest.mark.parametrize("method", ["nope+sink", "nope+sink+gate"])
def test_a_sink_takes_its_share_of_each_querys_mass(method):
    """Zero queries and keys, sink logit log 2: query i's i + 1 keys get 1 / (i + 3) each, the sink the
    rest (2 / (i + 3)); the gate after it changes nothing of that."""
    T = 12
    found = _probe(_model(method, blind=True, sink_init=math.log(2.0)), torch.randint(0, 50, (2, T)))
    n = torch.arange(1, T + 1, dtype=torch.float32)  # keys of query i
    want = torch.tril(torch.ones(T, T)) / (n + 2)[:, None]
    for p in found:
        assert torch.allclose(p, want.expand_as(p), atol=1e-6)


@pytest.mark.parametrize("method", ["nope+ssmax", "nope+ssmax+gate"])
def test_ssmax_changes_p_as_its_query_scale_says(method):
    """P is softmax((s log n_i) q_i . k_j / sqrt(hd)) over the causal keys, each row summing to 1."""
    model = _model(method, s_init=1.7)
    seen, own = {}, model.method.attend

    def attend(q, k, v, q_pos, k_pos, layer, state=None):
        seen.setdefault(layer, (q, k))  # the forward's call, before the probe's
        return own(q, k, v, q_pos, k_pos, layer, state)

    model.method.attend = attend
    T = 16
    found = _probe(model, torch.randint(0, 50, (2, T)))
    del model.method.attend
    scale = 1.7 * torch.arange(1, T + 1, dtype=torch.float32).log()[:, None] / math.sqrt(8)  # (T, 1)
    for p, (q, k) in zip(found, seen.values(), strict=True):
        scores = (q.float() @ k.float().transpose(-1, -2) * scale).masked_fill(~torch.ones(T, T).tril().bool(), -math.inf)
        assert torch.allclose(p, torch.softmax(scores, -1), atol=1e-5)


def test_a_modifier_whose_place_is_unsaid_or_inside_an_output_one_is_refused_in_one_line(monkeypatch):
    """The probe cannot read P through a modifier that does not say where it acts (``acts_on``), nor
    beneath an output-acting modifier when one that changes P composes after it."""
    import sys

    from posbench.core import registry

    registry.get("nope+sink+gate")  # imports both modifiers' files
    gate, sink = (next(m for n, m in sys.modules.items() if n.startswith(f"posbench_methods_{f}_")) for f in ("gate", "sink"))
    gate, sink = gate.OutputGate, sink.Sink
    x = torch.randint(0, 50, (1, 8))
    monkeypatch.setattr(gate, "acts_on", None)
    with pytest.raises(ValueError, match=r"^attention diagnostics of 'rotary\+gate': modifier 'gate' does not say") as err:
        diagnose(_model("rotary+gate"), x, [(1, 7)])
    assert "\n" not in str(err.value) and "acts_on" in str(err.value)
    monkeypatch.setattr(gate, "acts_on", "probabilities")
    monkeypatch.setattr(sink, "acts_on", "output")
    with pytest.raises(ValueError, match=r"'gate' changes the attention probabilities after 'sink' acted on the output"):
        diagnose(_model("nope+sink+gate"), x, [(1, 7)])

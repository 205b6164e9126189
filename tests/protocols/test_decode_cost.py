"""The frontier's decode cost (issue 39): a training case with ``decode_tokens`` times the decode
task's greedy steps with a KV cache at each target length, and records them per L_valid."""

import torch

from posbench.protocols.decode_cost import TPOT, TTFT, decode_cost
from posbench.protocols.generation import generate
from tests.helpers.cases import TINY, make_case
from tests.helpers.training import small_model


def test_decode_cost_times_each_target_length_and_leaves_the_model():
    model = small_model("alibi")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    prompt = torch.randint(0, 16, (1, 8), generator=torch.Generator().manual_seed(0))
    expected = generate(model.eval(), prompt, 4)[0]
    cost = decode_cost(model, [8, 24], "cpu", tokens=3)
    assert sorted(cost) == sorted([f"{TPOT}8", f"{TTFT}8", f"{TPOT}24", f"{TTFT}24"])
    assert all(v > 0 for v in cost.values())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(generate(model, prompt, 4)[0], expected)  # no hook left behind (last_position_only)


def test_extrapolation_case_records_the_decode_cost_at_each_L_valid(tmp_path):
    settings = {
        **TINY,
        "interpolate": False,
        "modes": ["nonoverlapping"],
        "L_valid": [8, 16],
        "decode_tokens": 2,
        "seeds": [0, 1],
    }
    task, case = make_case("extrapolation", "rotary", {"L_train": 8}, settings, tmp_path)
    metrics = task.run(case)["metrics"]
    assert metrics[f"{TPOT}8"] > 0 and metrics[f"{TPOT}16"] > 0 and metrics[f"{TTFT}16"] > 0
    assert metrics["n_seeds"] == 2  # measured once a case, beside the seeds' metrics
    _, plain = make_case("extrapolation", "rotary", {"L_train": 8}, {**settings, "decode_tokens": None}, tmp_path / "b")
    assert not any(k.startswith("decode_") for k in task.run(plain)["metrics"])


class ScriptedClock:
    """A device whose windows last the scripted seconds; the model itself runs on the CPU."""

    def __init__(self, times):
        self.times = list(times)

    def time_window(self, step, steps):
        assert steps == 1  # every prefill and decode step is its own window
        step()
        return self.times.pop(0)


def test_decode_cost_repeats_and_reports_median_and_spread(monkeypatch):
    import posbench.engine.timing
    from posbench.protocols.decode_cost import TPOT_MAX, TPOT_MIN

    # rounds over the lengths: per repeat, C=8 (a prefill, 3 steps) then C=24; drift doubles repeat 2 at C=8
    step_s = {
        8: [[0.001, 0.002, 0.003], [0.004, 0.004, 0.005], [0.002, 0.002, 0.002]],
        24: [[0.010, 0.010, 0.010], [0.011, 0.012, 0.013], [0.009, 0.009, 0.009]],
    }
    prefill_s = {8: [0.05, 0.07, 0.06], 24: [0.20, 0.10, 0.30]}
    script = [t for r in range(3) for C in (8, 24) for t in [prefill_s[C][r]] + step_s[C][r]]
    clock = ScriptedClock(script)
    monkeypatch.setattr(posbench.engine.timing, "make_device", lambda kind: clock)
    cost = decode_cost(small_model("alibi"), [8, 24], "cpu", tokens=3, repeats=3)
    assert not clock.times  # 3 repeats x 2 lengths x (1 prefill + 3 steps) windows, all taken
    # repeat medians: C=8 2, 4, 2 ms; C=24 10, 12, 9 ms
    assert cost[f"{TPOT}8"] == 2.0 and (cost[f"{TPOT_MIN}8"], cost[f"{TPOT_MAX}8"]) == (2.0, 4.0)
    assert cost[f"{TPOT}24"] == 10.0 and (cost[f"{TPOT_MIN}24"], cost[f"{TPOT_MAX}24"]) == (9.0, 12.0)
    assert round(cost[f"{TTFT}8"], 9) == 60.0 and round(cost[f"{TTFT}24"], 9) == 200.0  # medians of the prefills


def test_decode_cost_rejects_no_repeats():
    import pytest

    with pytest.raises(ValueError, match="decode repeats must be at least 1, got 0"):
        decode_cost(small_model("alibi"), [8], "cpu", tokens=2, repeats=0)


def test_decode_repeats_setting_defaults_to_three_and_reaches_the_case(tmp_path):
    from posbench.protocols.decode_cost import TPOT_MAX, TPOT_MIN
    from posbench.tasks import get as get_task

    assert get_task("extrapolation").Settings.model_validate({"model": "tiny", "steps": 3}).decode_repeats == 3
    settings = {
        **TINY,
        "interpolate": False,
        "modes": ["nonoverlapping"],
        "L_valid": [8],
        "decode_tokens": 2,
        "decode_repeats": 2,
    }
    task, case = make_case("extrapolation", "alibi", {"L_train": 8}, settings, tmp_path)
    m = task.run(case)["metrics"]
    assert m[f"{TPOT_MIN}8"] <= m[f"{TPOT}8"] <= m[f"{TPOT_MAX}8"]
    declared = task.METRICS
    assert all(f"{k}*" in declared for k in (TPOT_MIN, TPOT_MAX)) and declared[f"{TPOT_MIN}*"].unit == "ms"

"""The frontier's decode cost (issue 39): a training case with ``decode_tokens`` times the decode
task's greedy steps with a KV cache at each target length, and records them per L_valid."""
import torch

from posbench.tasks.decode.frontier import TPOT, TTFT, decode_cost
from posbench.tasks.decode.generation import generate
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
    settings = {**TINY, "interpolate": False, "modes": ["nonoverlapping"], "L_valid": [8, 16], "decode_tokens": 2,
                "seeds": [0, 1]}
    task, case = make_case("extrapolation", "rotary", {"L_train": 8}, settings, tmp_path)
    metrics = task.run(case)["metrics"]
    assert metrics[f"{TPOT}8"] > 0 and metrics[f"{TPOT}16"] > 0 and metrics[f"{TTFT}16"] > 0
    assert metrics["n_seeds"] == 2  # measured once a case, beside the seeds' metrics
    _, plain = make_case("extrapolation", "rotary", {"L_train": 8}, {**settings, "decode_tokens": None}, tmp_path / "b")
    assert not any(k.startswith("decode_") for k in task.run(plain)["metrics"])

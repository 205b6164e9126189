"""A suite profile's GPU time, estimated from its grid and budgets (issue 69): each budget's
arithmetic, the cap at a case's timeout, and the fewest shards that each fit a limit, split as the
runner splits them."""

from __future__ import annotations

import pytest

from posbench.core.case import CaseSpec
from posbench.core.config import model_config
from posbench.engine.flops import matmul_flops
from posbench.run import gpu_time
from posbench.run.suite import loading


def _case(method: str = "alibi", params: dict | None = None, **settings) -> CaseSpec:
    return CaseSpec(
        suite="s",
        task="extrapolation",
        method=method,
        params=params if params is not None else {"L_train": 64},
        settings={"model": "tiny", "timeout_s": None, **settings},
        device="cuda",
        profile="gpu",
        run_id="r",
    )


def test_a_time_budget_is_its_seconds_and_warm_up_per_seed_plus_the_overhead():
    case = _case(time_s=100.0, budget_warmup_s=2.0, seeds=[0, 1, 2])
    assert gpu_time.case_seconds(case) == 3 * (100.0 + 2.0 + gpu_time.CASE_OVERHEAD_S)


def test_steps_tokens_and_flops_budgets_are_the_models_training_operations_at_the_assumed_rate():
    per_sequence = 3 * matmul_flops(model_config("tiny"), 64)
    steps = _case(steps=1000, batch_size=8)
    assert gpu_time.case_seconds(steps) == pytest.approx(
        1000 * 8 * per_sequence / gpu_time.GPU_OPS_PER_S + gpu_time.CASE_OVERHEAD_S
    )
    tokens = _case(tokens=64 * 8000)
    assert gpu_time.case_seconds(tokens) == pytest.approx(gpu_time.case_seconds(steps))
    flops = _case(flops=1e17)
    assert gpu_time.case_seconds(flops) == pytest.approx(1e17 / gpu_time.GPU_OPS_PER_S + gpu_time.CASE_OVERHEAD_S)
    # a larger model costs more at the same budget
    train = gpu_time.case_seconds(steps) - gpu_time.CASE_OVERHEAD_S
    assert gpu_time.case_seconds(_case(steps=1000, batch_size=8, model="wt103")) - gpu_time.CASE_OVERHEAD_S > 100 * train


def test_a_measuring_case_is_its_rounds_and_no_case_outlasts_its_timeout():
    assert gpu_time.case_seconds(_case(params={"seq_len": 1024}, rounds=3)) == 3 * gpu_time.MEASURE_ROUND_S
    assert gpu_time.case_seconds(_case(params={"seq_len": 1024})) == gpu_time.MEASURE_ROUND_S
    assert gpu_time.case_seconds(_case(time_s=7200.0, seeds=[0, 1, 2], timeout_s=3600.0)) == 3600.0


def test_shards_follow_the_runners_split_and_each_fits_the_limit():
    cases = tuple(_case(m, {"L_train": n}) for n in (64, 128) for m in ("alibi", "rotary"))
    seconds = {c.id: s for c, s in zip(cases, (10.0, 20.0, 30.0, 40.0))}
    plain = gpu_time.Estimate("s", cases, seconds, timed=False)
    assert plain.total_s == 100.0 and plain.shards_for(100.0) == 1
    assert plain.shards_for(60.0) == 2 and [plain.shard_s(i, 2) for i in range(2)] == [40.0, 60.0]
    assert plain.shards_for(40.0) == 4 and plain.shards_for(39.0) is None  # one case longer than a job
    # a timed task's shard holds whole grid points: 30 + 70, never a point split
    timed = gpu_time.Estimate("s", cases, seconds, timed=True)
    assert [timed.shard_s(i, 2) for i in range(2)] == [30.0, 70.0] and timed.shards_for(60.0) is None


def test_the_frontier_gpu_profile_is_two_days_of_gpu_time():
    """The issue's arithmetic: 4 methods x 2 lengths x 3 seeds x 7,200 s = 48 GPU-hours."""
    estimate = gpu_time.estimate(loading.resolve(loading.load("frontier"), "gpu"))
    assert len(estimate.cases) == 8
    assert 48 * 3600 < estimate.total_s < 50 * 3600

"""Training budgets (issue 39): steps, tokens, measured time and counted operations, turned into
steps before the first one; their one-line errors; the operation count against a hand count."""

import textwrap

import pytest
import torch

from posbench.core import registry
from posbench.core.config import ModelConfig
from posbench.engine import budget as budget_mod
from posbench.engine.budget import MIN_TIMED_STEPS, TimeBudget, budget_of, measure_step_seconds, planned_steps, steps_for
from posbench.engine.flops import matmul_flops, position_flops, train_flops_per_step
from posbench.engine.train import TrainConfig, lr_at, step_flops, train, warm_up
from posbench.run import suite as suitemod
from posbench.run.suite import SuiteError
from tests.helpers.training import repeating_batches, small_model


class FakeClock:
    """A clock that moves only when a step runs: the first step ``first`` seconds, later ones ``each``."""

    def __init__(self, first: float, each: float):
        self.now, self.first, self.each, self.calls = 0.0, first, each, 0

    def __call__(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.first if self.calls == 0 else self.each
        self.calls += 1


def ticking(batches, clock: FakeClock, extra=lambda i: 0.0):
    """``batches`` with the fake clock moved by one step's time (plus ``extra(i)``) as each is drawn."""
    for i, batch in enumerate(batches):
        clock.step()
        clock.now += extra(i)
        yield batch


def test_time_budget_from_a_measured_warm_up_on_a_fake_clock():
    clock = FakeClock(first=1.0, each=0.25)  # a slow first step (allocation) is left out of the mean
    step_s, warmup_s, n = measure_step_seconds(clock.step, warmup_s=1.0, clock=clock)
    assert (step_s, warmup_s, n) == (0.25, 2.0, 4)  # 4 timed steps fill the 1 s warm-up
    assert steps_for("time_s", 10.0, tokens_per_step=64, step_seconds=step_s) == 40
    assert steps_for("time_s", 10.1, tokens_per_step=64, step_seconds=step_s) == 40  # floor: never over budget
    # a warm-up shorter than MIN_TIMED_STEPS steps still times that many
    clock = FakeClock(first=0.5, each=2.0)
    assert measure_step_seconds(clock.step, warmup_s=0.1, clock=clock)[2] == MIN_TIMED_STEPS


def test_tokens_and_flops_budgets_in_steps():
    assert steps_for("tokens", 6400, tokens_per_step=4 * 16) == 100
    assert steps_for("tokens", 6463, tokens_per_step=64) == 100
    assert steps_for("flops", 1e9, tokens_per_step=64, flops_per_step=3_000_000) == 333
    assert steps_for("steps", 7, tokens_per_step=64) == 7
    with pytest.raises(ValueError, match="at least one step"):
        steps_for("flops", 1e3, tokens_per_step=64, flops_per_step=3_000_000)
    assert TrainConfig(seq_len=16, batch_size=4, flops=1e6).total_steps(flops_per_step=1000) == 1000
    assert TrainConfig(seq_len=16, batch_size=4, time_s=3.0).total_steps(step_seconds=0.5) == 6


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(steps=3, time_s=5.0), "exactly one of steps or tokens or time_s or flops (given: steps, time_s)"),
        (dict(), "given: none"),
        (dict(time_s=0.0), "time_s must be a positive number"),
        (dict(flops=-1.0), "flops must be a positive number"),
    ],
)
def test_bad_budget_is_one_line(kwargs, message):
    with pytest.raises(ValueError) as info:
        budget_of(TrainConfig(**kwargs))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_matmul_and_position_flops_against_a_hand_count():
    cfg = ModelConfig(vocab_size=10, n_layers=1, d_model=4, n_heads=2, d_ff=8)
    # T=3: qkv 2*3*4*12 = 288, out 2*3*4*4 = 96, ff 2*(2*3*4*8) = 384, q k^T and a v 2*(2*3*3*4) = 144;
    # tied head 2*3*4*10 = 240
    assert matmul_flops(cfg, 3) == 288 + 96 + 384 + 144 + 240
    # grouped-query attention, one key/value head of 2: qkv 2*3*4*(4 + 2*2) = 192
    assert (
        matmul_flops(ModelConfig(vocab_size=10, n_layers=1, d_model=4, n_heads=2, n_kv_heads=1, d_ff=8), 3)
        == 192 + 96 + 384 + 144 + 240
    )
    by_hand = {
        "nope": 0,
        "sinusoidal": 3 * 4,  # a (T, D) table added once
        "rotary": 2 * 3 * 3 * 4,  # q and k rotated, 3 operations an element, one layer
        "alibi": 2 * 3 * 3,
        "t5_bias": 2 * 3 * 3,
    }  # an (H, T, T) bias added in one layer
    for name, count in by_hand.items():
        assert position_flops(registry.get(name), cfg, 3) == count, name
    assert train_flops_per_step(registry.get("alibi"), cfg, 3, batch_size=2) == 3 * 2 * (1152 + 18)

    class Declared:
        @staticmethod
        def position_flops(cfg, seq_len):
            return 7 * seq_len

    assert position_flops(Declared, cfg, 5) == 35  # a method's own count wins


def test_flops_budget_trains_the_steps_it_allows():
    model = small_model("alibi")
    per_step = step_flops(model, TrainConfig(seq_len=16, batch_size=4))
    cfg = TrainConfig(seq_len=16, batch_size=4, flops=per_step * 5.5, warmup_steps=1)
    r = train(model, repeating_batches(), cfg)
    assert r.steps == 5 and r.flops == 5 * per_step
    assert r.budget == {"kind": "flops", "value": per_step * 5.5, "steps": 5}


def test_time_budget_warm_up_leaves_the_weights_and_sets_the_steps(monkeypatch):
    model = small_model("rotary")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    cfg = TrainConfig(seq_len=16, batch_size=4, time_s=1.0, warmup_s=0.05)
    step_s, took, n = warm_up(model, model, cfg, torch.device("cpu"), None)
    assert step_s > 0 and took > 0 and n >= MIN_TIMED_STEPS
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # with the run's data: the warm-up draws from its own iterator (batch-making is timed too)
    drawn = []

    def spare():
        for batch in repeating_batches(seed=5):
            drawn.append(batch)
            yield batch

    assert warm_up(model, model, cfg, torch.device("cpu"), None, spare())[2] == len(drawn) - 1  # + the untimed step
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    # the run's steps follow the warm-up's measure (a fixed one here: no timing assertion)
    import posbench.engine.train as engine_train

    monkeypatch.setattr(engine_train, "measure_step_seconds", lambda step, warmup_s, sync: (0.125, 0.5, 3))
    # the run spends the budget on the clock: a fake one whose steps take the warm-up's 0.125 s
    clock = FakeClock(first=0.125, each=0.125)
    monkeypatch.setattr(budget_mod, "now", clock)
    r = train(
        small_model("rotary"),
        ticking(repeating_batches(), clock),
        TrainConfig(seq_len=16, batch_size=4, time_s=0.75, warmup_s=0.05, warmup_steps=1, log_every=1),
    )
    assert r.steps == 6 and r.budget == {
        "kind": "time_s",
        "value": 0.75,
        "warmup_seconds": 0.5,
        "warmup_steps": 3,
        "step_seconds": 0.125,
        "steps": 6,
    }
    assert len(r.curve) == 6  # the schedule and the loop ran the 6 steps the budget allows


SUITE = """
name: budgets
description: a budget per test
version: 1
task: extrapolation
methods: [alibi]
grid: {{L_train: [8]}}
settings:
  model: tiny
  corpus: {{kind: synthetic}}
  {budget}
"""


@pytest.mark.parametrize(
    "budget, says",
    [
        ("steps: 3\n  time_s: 60.0", "exactly one training budget: steps, tokens, time_s or flops (given: steps, time_s)"),
        ("time_s: 0.0", "greater than 0"),
        ("flops: -5.0", "greater than 0"),
        ("steps: 0", "greater than or equal to 1"),
        ("time_s: 1.5", "not above the warm-up"),
    ],
)
def test_suite_validation_names_a_bad_budget_in_one_line(tmp_path, budget, says):
    path = tmp_path / "b.yaml"
    path.write_text(textwrap.dedent(SUITE.format(budget=budget)))
    with pytest.raises(SuiteError) as info:
        suitemod.resolve(suitemod.load(path), "default")
    assert says in str(info.value) and "\n" not in str(info.value)


def test_suite_accepts_each_budget(tmp_path):
    for budget in ("steps: 3", "tokens: 1000", "time_s: 30.0", "flops: 1.0e+9"):
        path = tmp_path / "b.yaml"
        path.write_text(textwrap.dedent(SUITE.format(budget=budget)))
        s = suitemod.resolve(suitemod.load(path), "default").settings
        kind = budget.split(":")[0]
        assert budget_of(s.train_config(8, 0))[0] == kind


def test_time_budget_re_plans_its_steps_from_the_clock():
    # before the first step the warm-up's step time plans; then the run's own mean step time does
    assert planned_steps(10.0, 0.0, 0, 0.25) == 40
    assert planned_steps(10.0, 5.0, 10, 0.25) == 20  # steps took 0.5 s, twice the warm-up's: 10 more fit
    assert planned_steps(10.0, 1.0, 10, 0.25) == 100  # steps took 0.1 s: 90 more fit
    assert planned_steps(0.75, 0.375, 3, 0.125) == 6  # an exact multiple keeps its last step
    assert planned_steps(10.0, 9.9, 20, 0.25) == 20  # less than a mean step left: stop
    assert planned_steps(10.0, 12.0, 20, 0.25) == 20  # never below the steps done
    with pytest.raises(ValueError, match="positive step time"):
        planned_steps(10.0, 0.0, 0, 0.0)
    clock = FakeClock(first=1.0, each=1.0)
    b = TimeBudget(10.0, 2.0, clock=clock)
    assert b.total() == 5
    clock.step()
    b.tick()
    assert (b.spent, b.total()) == (1.0, 10)
    with b.paused():  # a held-out check: its time is not spent from the budget
        clock.now += 100.0
    clock.step()
    b.tick()
    assert (b.done, b.spent, b.total()) == (2, 2.0, 10)


class Lrs:
    """A tracker that keeps the learning rate of every logged step."""

    def __init__(self):
        self.lr = {}

    def scalars(self, values, step):
        self.lr[step] = values["train/lr"]


@pytest.mark.parametrize("warm_up_says, plans", [(0.05, 200), (0.2, 50), (0.4, 25)])
def test_time_budget_spends_its_seconds_whatever_the_warm_up_measured(monkeypatch, warm_up_says, plans):
    """A warm-up that misjudges the step time (0.05 or 0.4 s against a true 0.2 s, as on a busy
    machine) still trains 0.2 s steps until the 10 s budget is spent, and the lr decays to its end."""
    import posbench.engine.train as engine_train

    monkeypatch.setattr(engine_train, "measure_step_seconds", lambda step, warmup_s, sync: (warm_up_says, 1.0, 5))
    clock = FakeClock(first=0.2, each=0.2)
    monkeypatch.setattr(budget_mod, "now", clock)
    cfg = TrainConfig(seq_len=16, batch_size=4, time_s=10.0, warmup_s=1.0, warmup_steps=5, log_every=1)
    lrs = Lrs()
    r = train(small_model("alibi"), ticking(repeating_batches(), clock), cfg, tracker=lrs)
    assert r.steps == 50 and r.budget["steps"] == plans  # reached vs the warm-up's plan
    assert abs(r.budget_seconds - 10.0) <= 0.2  # within one step of the budget
    assert not r.stopped_early and len(r.curve) == 50
    assert lrs.lr[49] == pytest.approx(lr_at(49, cfg, 50))  # the last step's lr is the schedule's last
    assert lrs.lr[49] < 0.11 * cfg.lr  # decayed to its end (min_lr_ratio 0.1)
    assert max(lrs.lr.values()) == pytest.approx(cfg.lr)


def test_time_budget_slowing_down_mid_run_stops_on_time(monkeypatch):
    import posbench.engine.train as engine_train

    monkeypatch.setattr(engine_train, "measure_step_seconds", lambda step, warmup_s, sync: (0.1, 1.0, 10))
    clock = FakeClock(first=0.1, each=0.1)
    monkeypatch.setattr(budget_mod, "now", clock)
    # from step 20 on another job shares the core: every step takes 0.3 s
    batches = ticking(repeating_batches(), clock, extra=lambda i: 0.2 if i >= 20 else 0.0)
    r = train(small_model("alibi"), batches, TrainConfig(seq_len=16, batch_size=4, time_s=10.0, warmup_steps=1))
    assert r.budget["steps"] == 100  # the warm-up's plan, far off
    assert r.steps == 46 and r.budget_seconds == pytest.approx(9.8)  # 20 x 0.1 s + 26 x 0.3 s: a 27th would pass 10 s


def test_time_budget_leaves_held_out_checks_out_of_its_seconds(monkeypatch):
    import posbench.engine.train as engine_train

    monkeypatch.setattr(engine_train, "measure_step_seconds", lambda step, warmup_s, sync: (0.5, 1.0, 2))
    clock = FakeClock(first=0.5, each=0.5)
    monkeypatch.setattr(budget_mod, "now", clock)
    checked = []

    def check(done):  # a held-out check taking 3 s every 4 steps, never met
        if done % 4 == 0:
            clock.now += 3.0
            checked.append(done)
        return False

    r = train(
        small_model("alibi"),
        ticking(repeating_batches(), clock),
        TrainConfig(seq_len=16, batch_size=4, time_s=10.0, warmup_steps=1),
        until=check,
    )
    assert r.steps == 20 and r.budget_seconds == pytest.approx(10.0) and checked == [4, 8, 12, 16]
    assert not r.stopped_early


def test_warm_up_ranks_agree_on_one_more_step():
    # two ranks' clocks disagree on when the warm-up is over: the slower one keeps both going
    clock = FakeClock(first=0.5, each=0.25)
    asked = []

    def agree(more):  # the other rank wants 6 timed steps whatever this one's clock says
        asked.append(more)
        return more or len(asked) <= 6

    assert measure_step_seconds(clock.step, warmup_s=1.0, clock=clock, agree=agree)[2] == 6
    assert asked[:4] == [True] * 4 and asked[4:] == [False, False, False]

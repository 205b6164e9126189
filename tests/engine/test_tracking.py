"""Training curves (posbench.engine.tracking): TensorBoard event files read back with tensorboard's own
reader, W&B through a fake module, the env.json line, and the efficiency task logging only between
its timed windows."""

import sys
import time
import types

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posbench.engine import env, tracking
from posbench.engine.train import TrainConfig, train
from posbench.tasks.efficiency import run as efficiency_run
from tests.helpers.cases import TINY, make_case
from tests.helpers.training import repeating_batches, small_model


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of every event file in ``folder``, through tensorboard's reader."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})  # 0: keep every event
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_short_extrapolation_writes_event_files_tensorboard_reads(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    task, case = make_case(
        "extrapolation",
        "alibi",
        {"L_train": 8},
        {**TINY, "steps": 12, "warmup_steps": 2, "interpolate": False, "modes": ["nonoverlapping"]},
        tmp_path,
    )
    out = task.run(case)
    folder = tmp_path / "cases" / "alibi__L_train=8"
    assert list(folder.glob("events.out.tfevents.*")), "no event file in the case's folder"
    got = scalars(folder)
    assert set(got) == {
        "train/loss",
        "train/lr",
        "train/tokens_per_s",
        "eval/nonoverlapping@8/ppl",
        "eval/nonoverlapping@8/loss",
        "eval/nonoverlapping@16/ppl",
        "eval/nonoverlapping@16/loss",
        "eval/nonoverlapping/ppl_vs_length",
    }  # perplexity against length: one curve (issue 42)
    # train() logs every log_every (10) steps and at the last one: steps 0, 10, 11.
    assert [s for s, _ in got["train/loss"]] == [0, 10, 11]
    curve = out["series"]["train_loss"]
    assert [v for _, v in got["train/loss"]] == pytest.approx([v for _, v in curve], rel=1e-6)  # float32 events
    lr = [v for _, v in got["train/lr"]]
    assert lr[0] == pytest.approx(1e-3 * 1 / 2, rel=1e-6)  # warm-up step 1 of 2 (TINY's lr 1e-3)
    assert all(v > 0 for _, v in got["train/tokens_per_s"])
    # Evaluations at the last training step, the row's perplexity.
    assert got["eval/nonoverlapping@16/ppl"] == [(11, pytest.approx(out["metrics"]["ppl@nonoverlapping@16"], rel=1e-6))]


def test_seeds_get_a_folder_each_and_no_run_folder_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    settings = {**TINY, "steps": 2, "interpolate": False, "modes": ["nonoverlapping"], "L_valid_factors": [1]}
    task, case = make_case("extrapolation", "rotary", {"L_train": 8}, {**settings, "seeds": [1, 2]}, tmp_path)
    task.run(case)
    names = sorted(p.name for p in (tmp_path / "cases").iterdir())
    assert names == ["rotary__L_train=8@seed1", "rotary__L_train=8@seed2"]
    assert all("train/loss" in scalars(tmp_path / "cases" / n) for n in names)
    assert tracking.open_tracker(tracking.case_folder("", "x")).writers == []  # no run folder: nothing written


class Recorder:
    """A writer that keeps what it was given: calls [(tag, step, value)] and how often it was closed."""

    def __init__(self):
        self.calls, self.closed = [], 0

    def scalar(self, tag, value, step):
        self.calls.append((tag, step, value))

    def close(self):
        self.closed += 1


def test_train_logs_to_a_tracker_with_its_steps_lr_and_rate():
    rec = Recorder()
    cfg = TrainConfig(seq_len=16, batch_size=4, steps=7, warmup_steps=4, lr=2e-3, log_every=3)
    r = train(small_model(), repeating_batches(), cfg, tracker=tracking.Tracker([rec]))
    by_tag = {}
    for tag, step, value in rec.calls:
        by_tag.setdefault(tag, []).append((step, value))
    assert [s for s, _ in by_tag["train/loss"]] == [0, 3, 6] == [s for s, _ in r.curve]
    assert [v for _, v in by_tag["train/loss"]] == [v for _, v in r.curve]
    assert by_tag["train/lr"][0] == (0, pytest.approx(2e-3 / 4)) and by_tag["train/lr"][1] == (3, pytest.approx(2e-3))
    assert all(v > 0 for _, v in by_tag["train/tokens_per_s"])


def test_tracker_skips_missing_values_and_closes_once():
    w = Recorder()
    with tracking.Tracker([w]) as t:
        t.scalars({"a": 1, "b": None, "c": float("nan"), "d": float("inf")}, 3)
        t.window("train", 4, 100.0, 2.5)
    t.close()
    assert w.calls == [("a", 3, 1.0), ("train/tokens_per_s", 4, 100.0), ("train/loss", 4, 2.5)] and w.closed == 1


def test_wandb_through_a_fake_module(tmp_path, monkeypatch):
    """--log wandb: one W&B run per case in the case's folder, each scalar with its own step field
    (a fake wandb module: the real one starts a service process)."""
    runs = []

    class FakeRun:
        def __init__(self, **kw):
            self.init, self.logged, self.defined, self.finished = kw, [], [], False
            runs.append(self)

        def define_metric(self, name, step_metric=None):
            self.defined.append((name, step_metric))

        def log(self, data):
            self.logged.append(data)

        def finish(self):
            self.finished = True

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: FakeRun(**kw), __version__="9"))
    monkeypatch.setenv(tracking.LOG_ENV, "wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    task, case = make_case(
        "extrapolation",
        "alibi",
        {"L_train": 8},
        {**TINY, "steps": 2, "interpolate": False, "modes": ["nonoverlapping"], "L_valid_factors": [1]},
        tmp_path,
    )
    task.run(case)
    (run,) = runs
    assert run.init["name"] == "alibi/L_train=8" and run.init["dir"] == str(tmp_path / "cases" / "alibi__L_train=8")
    assert run.init["config"]["method"] == "alibi" and run.init["config"]["settings"]["steps"] == 2
    assert ("*", "step") in run.defined and run.finished
    assert {"train/loss", "eval/nonoverlapping@8/ppl"} <= {k for d in run.logged for k in d if k != "step"}
    assert [d["step"] for d in run.logged if "train/loss" in d] == [0, 1]
    assert "wandb 9 (mode offline)" in tracking.status()
    assert list((tmp_path / "cases" / "alibi__L_train=8").glob("events.out.tfevents.*"))  # TensorBoard as well


def test_env_json_says_in_one_line_when_the_writer_is_absent(monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    assert env.collect("cpu")["tracking"].startswith("tensorboard ")
    monkeypatch.setattr(tracking, "tensorboard_version", lambda: None)
    line = env.collect("cpu")["tracking"]
    assert line == "absent: no training curves (tensorboard is not installed; pip install 'posbench[track]')"
    monkeypatch.setenv(tracking.LOG_ENV, "none")
    assert tracking.status() == "off: POSBENCH_LOG=none"
    assert tracking.open_tracker(tracking.case_folder("/nonexistent", "x")).writers == []
    monkeypatch.setenv(tracking.LOG_ENV, "mlflow")
    with pytest.raises(ValueError, match="unknown writer 'mlflow'; allowed: wandb, none"):
        tracking.requested()


def test_efficiency_logs_only_between_timed_windows(tmp_path, monkeypatch):
    """Every scalar the efficiency task logs is written while no window's clock runs, in both the
    per-case path and the paired-windows group."""
    from posbench.engine import timing

    inside = {"now": False}
    seen = []
    real = timing.CpuDevice.time_window

    def timed(self, step, steps):
        inside["now"] = True
        try:
            return real(self, step, steps)
        finally:
            inside["now"] = False

    class Probe:
        def scalar(self, tag, value, step):
            assert not inside["now"], f"{tag} logged inside a timed window"
            seen.append((tag, step))

        def close(self):
            pass

    monkeypatch.setattr(timing.CpuDevice, "time_window", timed)
    monkeypatch.setattr(tracking, "open_tracker", lambda folder, name="", config=None: tracking.Tracker([Probe()], folder))
    settings = {
        "model": "tiny",
        "model_overrides": {"n_layers": 1, "d_model": 32, "n_heads": 2, "d_ff": 64},
        "tokens_per_step": 32,
        "warmup_steps": 1,
        "measure_steps": 1,
        "windows": 2,
    }
    task, case = make_case("efficiency", "rotary", {"seq_len": 8}, settings, tmp_path)
    task.run(case)
    assert sorted(seen) == sorted(
        [(f"{p}/{m}", w) for p in ("eval", "train") for w in (0, 1) for m in ("tokens_per_s",)]
        + [("train/loss", 0), ("train/loss", 1)]
    )
    seen.clear()
    _, other = make_case("efficiency", "alibi", {"seq_len": 8}, settings, tmp_path)
    monkeypatch.setattr(efficiency_run, "memory_probe", lambda c: {"status": "ok", "metrics": {}})
    task.run_group([case, other], 2)  # round 2: windows 2 and 3 of each case
    assert sorted(s for t, s in seen if t == "train/tokens_per_s") == [2, 2, 3, 3]


def test_log_flag_sets_the_workers_writers_and_refuses_wandb_when_absent(monkeypatch):
    import importlib.util

    from posbench.cli.run_flags import set_log
    from posbench.run.suite import SuiteError

    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    set_log("none")
    assert tracking.requested() == ["none"]
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(SuiteError, match=r"^--log wandb: the wandb package is not installed \(pip install wandb\)"):
        set_log("wandb")


@pytest.mark.subprocess  # wandb.init starts its service process
def test_real_wandb_offline_run_in_the_case_folder(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is an optional extra (pip install 'posbench[wandb]')")
    monkeypatch.setenv(tracking.LOG_ENV, "wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    with tracking.open_tracker(tmp_path / "case", "alibi/L_train=8", {"method": "alibi"}) as t:
        t.scalars({"train/loss": 2.5, "train/lr": 1e-3}, 0)
        t.window("eval", 0, 123.0)  # a step behind nothing: W&B's own step is never used
    (data,) = (tmp_path / "case" / "wandb").glob("offline-run-*/run-*.wandb")
    # wandb's service process may still be flushing the file when finish() returns (1 run in 3
    # read it short on a loaded machine): wait for it, up to a bound.
    deadline = time.monotonic() + 30
    while not (b"train/loss" in (blob := data.read_bytes()) and b"eval/tokens_per_s" in blob):
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert b"train/loss" in blob and b"eval/tokens_per_s" in blob

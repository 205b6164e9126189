"""Training curves (posbench.engine.tracking): TensorBoard event files read back with tensorboard's own
reader, W&B through a fake module, the env.json line, and the efficiency task logging only between
its timed windows."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import types
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from posbench.cli import app as cli
from posbench.core.files import UnsafeFile
from posbench.engine import env, tracking
from posbench.engine.train import TrainConfig, train
from posbench.tasks.efficiency import run as efficiency_run
from tests.helpers.cases import TINY, make_case
from tests.helpers.suites import efficiency_suite, write_suite
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


# Tracking options and folders (posbench/engine/tracking.py): POSBENCH_LOG is refused up front as
# --log is, a results path TensorBoard cannot write is one line before any case runs, and a link at
# cases/<name> or cases/ never receives event files (issue 44).


def dry_run(tmp_path, capsys, results=None) -> tuple[int, str]:
    code = cli.main(["--suite", "extrapolation", "--dry-run", "--results", str(results or tmp_path / "results")])
    return code, capsys.readouterr().err


def test_posbench_log_bogus_in_the_environment_is_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(tracking.LOG_ENV, "bogus")
    code, err = dry_run(tmp_path, capsys)
    assert code == 2 and err == "SuiteError: POSBENCH_LOG: unknown writer 'bogus'; allowed: wandb, none\n"
    assert not (tmp_path / "results").exists()


def test_posbench_log_wandb_without_wandb_is_refused_up_front(tmp_path, capsys, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.setenv(tracking.LOG_ENV, "wandb")
    code, err = dry_run(tmp_path, capsys)
    assert code == 2 and err.startswith("SuiteError: POSBENCH_LOG=wandb: the wandb package is not installed")
    assert err.count("\n") == 1


def test_a_results_path_that_is_not_utf8_is_one_line_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    if tracking.tensorboard_version() is None:
        pytest.skip("tensorboard is not installed: no event files, nothing to refuse")
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/r\xff")
    code, err = dry_run(tmp_path, capsys, bad)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith("SuiteError: --results ") and "the path is not UTF-8" in err and "--log none" in err
    with pytest.raises(ValueError, match=r"^training curves: .*the path is not UTF-8"):
        tracking.open_tracker(tracking.case_folder(bad, "alibi/L_train=8"))


@pytest.mark.parametrize("link", ["cases/alibi__L_train=8", "cases"])
def test_a_link_in_cases_never_receives_event_files(tmp_path, monkeypatch, link):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    outside = tmp_path / "outside"
    (outside / "alibi__L_train=8").mkdir(parents=True)
    run = tmp_path / "run"
    (run / link).parent.mkdir(parents=True, exist_ok=True)
    os.symlink(outside if link == "cases" else outside / "alibi__L_train=8", run / link)
    with pytest.raises(UnsafeFile, match=r"is a symbolic link; posbench does not follow links in a run folder"):
        tracking.open_tracker(tracking.case_folder(run, "alibi/L_train=8"))
    assert list((outside / "alibi__L_train=8").iterdir()) == []


# Curves as TensorBoard and W&B show them (issue 42, item 7): perplexity against length as one tag
# (step = L_valid); one event file per case, whatever the number of processes (rounds, the
# efficiency memory probe, a retry), with no (tag, step) twice; W&B runs grouped by run id with a
# name of their own. Read back with tensorboard's own reader; W&B through a fake module.


def raw_steps(folder) -> dict[str, list[int]]:
    """{tag: [step, ...]} of every scalar event written, purged or not (what the file holds)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    out: dict[str, list[int]] = {}
    for path in sorted(folder.glob("*tfevents*")):
        for event in EventFileLoader(str(path)).Load():
            for value in event.summary.value:
                out.setdefault(value.tag, []).append(event.step)
    return out


def test_perplexity_against_length_is_one_curve_with_the_rows_values(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    task, case = make_case(
        "extrapolation",
        "alibi",
        {"L_train": 8},
        {**TINY, "steps": 3, "interpolate": False, "modes": ["nonoverlapping"], "L_valid_factors": [1, 2, 4]},
        tmp_path,
    )
    out = task.run(case)
    got = scalars(tmp_path / "cases" / "alibi__L_train=8")
    curve = got["eval/nonoverlapping/ppl_vs_length"]
    assert [step for step, _ in curve] == [8, 16, 32]
    assert [v for _, v in curve] == pytest.approx([out["metrics"][f"ppl@nonoverlapping@{L}"] for L in (8, 16, 32)], rel=1e-6)


def test_each_process_of_a_case_appends_to_its_one_event_file(tmp_path, monkeypatch):
    """A later round goes on from the steps already there; a retried case starting again at step 0
    replaces the old curve (TensorBoard's SessionLog START), and the file stays one."""
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    folder = tmp_path / "case"
    with tracking.open_tracker(folder, "c") as t:
        assert t.next_step() == 0
        t.scalars({"train/loss": 3.0}, 0)
        t.scalars({"train/loss": 2.0}, 1)
    with tracking.open_tracker(folder, "c") as t:  # round 2, its own process
        first = t.next_step()
        t.scalars({"train/loss": 1.5}, first)
    assert first == 2 and scalars(folder) == {"train/loss": [(0, 3.0), (1, 2.0), (2, 1.5)]}
    with tracking.open_tracker(folder, "c") as t:  # the case run again from the start
        t.scalars({"train/loss": 9.0}, 0)
        t.scalars({"train/loss": 8.0}, 1)
    assert scalars(folder) == {"train/loss": [(0, 9.0), (1, 8.0)]}
    assert [p.name for p in folder.iterdir()] == [tracking.EVENT_FILE]


def _run_efficiency(tmp_path, pairing: str) -> int:
    extra = (
        f"  warmup_steps: 1\n  measure_steps: 1\n  eval_measure_steps: 1\n  windows: 2\n  rounds: 2\n"
        f"  pairing: {pairing}\n  threads: 1\n"
    )
    write_suite(tmp_path, efficiency_suite(extra, grid="[16]"))
    return cli.main(
        [
            "--suite",
            str(tmp_path / "t.yaml"),
            "--device",
            "cpu",
            "--results",
            str(tmp_path / "res"),
            "--quiet",
            "--run-id",
            "r",
            "--methods",
            "sinusoidal",
        ]
    )


@pytest.mark.subprocess  # the runner's worker processes: a memory probe, then a process per round
@pytest.mark.parametrize("pairing", ["windows", "rounds"])
def test_an_efficiency_run_logs_each_window_once_in_one_event_file(tmp_path, monkeypatch, pairing):
    """Paired windows used to log every tag at step 0 twice, in two files: the memory probe's own
    process logged its one window too. Rounds in processes of their own counted from 0 again."""
    monkeypatch.delenv(tracking.LOG_ENV, raising=False)
    assert _run_efficiency(tmp_path, pairing) == 0
    (folder,) = (tmp_path / "res" / "e" / "r" / "cases").iterdir()
    assert [p.name for p in folder.iterdir()] == [tracking.EVENT_FILE]
    # two rounds of two windows: steps 0..3, each once, in the file and as TensorBoard shows it
    wanted = {"eval/tokens_per_s": [0, 1, 2, 3], "train/tokens_per_s": [0, 1, 2, 3], "train/loss": [0, 1, 2, 3]}
    assert {tag: sorted(steps) for tag, steps in raw_steps(folder).items()} == wanted
    assert {tag: sorted(s for s, _ in points) for tag, points in scalars(folder).items()} == wanted


class FakeRun:
    """What ``wandb.init`` returns; records its keyword arguments and makes the run's folder as
    wandb does (``<dir>/wandb/offline-run-*``)."""

    def __init__(self, runs, **kw):
        self.init, self.logged = kw, []
        runs.append(self)
        (Path(kw["dir"]) / "wandb" / f"offline-run-{len(runs)}").mkdir(parents=True)

    def define_metric(self, name, step_metric=None):
        pass

    def log(self, data):
        self.logged.append(data)

    def finish(self):
        pass


def test_wandb_runs_are_grouped_by_run_id_and_never_share_a_name(tmp_path, monkeypatch):
    runs = []
    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=lambda **kw: FakeRun(runs, **kw)))
    monkeypatch.setenv(tracking.LOG_ENV, "wandb")
    settings = {**TINY, "steps": 2, "interpolate": False, "modes": ["nonoverlapping"], "L_valid_factors": [1]}
    for method in ("alibi", "rotary"):
        task, case = make_case("extrapolation", method, {"L_train": 8}, settings, tmp_path)
        task.run(case)
    task.run(case)  # rotary again (a retry, or the next round of a timed task): a name of its own
    assert [r.init["group"] for r in runs] == ["r", "r", "r"]
    names = [r.init["name"] for r in runs]
    assert names == ["alibi/L_train=8", "rotary/L_train=8", "rotary/L_train=8 #2"]
    assert len(set(names)) == len(names)

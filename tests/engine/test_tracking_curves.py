"""Curves as TensorBoard and W&B show them (issue 42, item 7): perplexity against length as one
tag (step = L_valid); one event file per case, whatever the number of processes (rounds, the
efficiency memory probe, a retry), with no (tag, step) twice; W&B runs grouped by run id with a
name of their own. Read back with tensorboard's own reader; W&B through a fake module."""

import sys
import types
from pathlib import Path

import pytest

from posbench.cli import app as cli
from posbench.engine import tracking
from tests.helpers.cases import TINY, make_case
from tests.helpers.suites import efficiency_suite, write_suite

pytest.importorskip("tensorboard", reason="tensorboard is the optional [track] extra: no event files to read")
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value)]} of ``folder``'s event files as TensorBoard shows them."""
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


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

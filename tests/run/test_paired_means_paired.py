"""Paired means paired: a method joining a finished timed run re-measures the grid points it joins
with every method (or, ``--unpaired``, runs alone and its ratios say so); a table pairs windows
only within one process and ratios only within one run folder, and marks the rest unpaired."""

import json
import math
import random
import statistics

import pytest

from posbench.report import bootstrap
from posbench.report import rows as rowsmod
from posbench.report.tabulate import metric_tables
from posbench.run import runner
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.schedule import jobs, plan_rounds
from posbench.store.run_rows import read_rows
from posbench.tasks import find as find_task
from tests.helpers.report_rows import write_run
from tests.helpers.suites import make_suite


def _finished_folder(tmp_path, methods, rounds, **settings):
    """A run folder where ``methods`` finished every round at n=1 (rows as the runner writes them)."""
    path = make_suite(tmp_path, ["sinusoidal", "rotary"], rounds=rounds, **settings)
    suite = suitemod.resolve(suitemod.load(path), "default")
    run_dir = tmp_path / "res" / "t" / "r"
    run_dir.mkdir(parents=True)
    rows = [
        {"case_id": f"{m}/n=1", "method": m, "params": {"n": 1}, "status": "ok", "metrics": {"value": 1.0}, "round": r}
        for r in range(1, rounds + 1)
        for m in methods
    ]
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    # the runner's run.json names the methods the run held: a method it lacks is a newcomer
    meta = {"suite": "t", "version": 1, "task": "_testing", "baseline": methods[0], "methods": methods, "metrics": []}
    (run_dir / "run.json").write_text(json.dumps(meta))
    return suite, run_dir


@pytest.mark.parametrize("pairing", ["rounds", "windows"])
def test_a_joining_method_re_measures_its_grid_point_with_every_method(tmp_path, pairing):
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal", "rotary"], 2, pairing=pairing)
    todo = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir).todo
    # every (case, round) of the point again, alibi among them, in the schedule's order
    assert sorted((c.id, r) for c, r in todo) == sorted(
        (f"{m}/n=1", r) for m in ("sinusoidal", "rotary", "alibi") for r in (1, 2)
    )
    if pairing == "windows":  # one process per round holds all three
        assert [sorted(c.method for c in cases) for cases, _r in jobs(todo)] == [["alibi", "rotary", "sinusoidal"]] * 2
    # --unpaired: alibi alone, its (case, round)s named as unpaired
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"], unpaired=True), "r", run_dir)
    todo, lone = plan.todo, plan.lone
    assert [(c.id, r) for c, r in todo] == [("alibi/n=1", 1), ("alibi/n=1", 2)]
    assert lone == {("alibi/n=1", 1), ("alibi/n=1", 2)}


def test_an_interrupted_grid_point_resumes_without_re_measuring(tmp_path):
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal"], 1, pairing="rounds")
    # sinusoidal has round 1 of 2 only: the run was interrupted, not joined
    suite = suitemod.resolve(suitemod.load(make_suite(tmp_path, ["sinusoidal", "rotary"], rounds=2)), "default")
    todo = plan_rounds(suite, RunOptions("cpu", run_dir.parent), "r", run_dir).todo
    assert ("sinusoidal/n=1", 1) not in [(c.id, r) for c, r in todo] and len(todo) == 3


@pytest.mark.subprocess
def test_the_runner_re_measures_or_marks_the_newcomer_unpaired(tmp_path):
    path = make_suite(tmp_path, ["sinusoidal", "rotary"], pairing="windows")
    suite = suitemod.resolve(suitemod.load(path), "default")
    first = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    assert first.ran == 2
    joined = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", methods=("alibi",), progress=False))
    assert joined.ran == 3  # sinusoidal and rotary again, with alibi, in one process
    rows = read_rows(joined.run_dir / "cases.jsonl")[2:]
    assert len({r["metrics"]["pid"] for r in rows}) == 1 and all(r["info"]["group_size"] == "3" for r in rows)
    assert all("paired" not in r["info"] for r in rows)
    alone = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", methods=("fire",), unpaired=True, progress=False))
    assert alone.ran == 1
    (row,) = read_rows(alone.run_dir / "cases.jsonl")[5:]
    assert row["method"] == "fire" and row["info"]["paired"] is False


# -- the tables: a slower and a faster method, paired and not ----------------------------------


def _windows(rng, level, ratio, n=12):
    """(method, baseline) windows of one process: alternating, under the process's speed ``level``."""
    method, base = [], []
    for w in range(n):
        drift = level * (1 + 0.1 * math.sin(w / 3))
        base.append(1000 * drift * (1 + rng.gauss(0, 0.004)))
        method.append(1000 * drift * ratio * (1 + rng.gauss(0, 0.004)))
    return method, base


def _row(method, r, values, group, run_id="run-p", paired=None):
    info = {"pairing": "windows", "group": group}
    if paired is not None:
        info["paired"] = paired
    return {
        "case_id": f"{method}/seq_len=64",
        "suite": "efficiency",
        "task": "efficiency",
        "method": method,
        "params": {"seq_len": 64},
        "status": "ok",
        "message": "",
        "metrics": {"train_wps": statistics.median(values)},
        "series": {"train_wps_windows": values},
        "info": info,
        "settings": {"rounds": 3, "pairing": "windows"},
        "device": "cpu",
        "run_id": run_id,
        "started_at": f"2026-01-01T00:{r:02d}:00+00:00",
        "git_commit": "abc",
        "round": r,
    }


def _table(tmp_path, rows, methods):
    run = write_run(tmp_path, rows, metrics=["train_wps"], methods=methods)
    (table,) = metric_tables(rowsmod.load_runs(run, find_task=find_task), "efficiency", metrics=["train_wps"])
    return table


def test_a_slower_and_a_faster_method_re_measured_pair_within_their_intervals(tmp_path):
    rng = random.Random(3)
    rows = []
    for r, level in enumerate((1.0, 0.8, 1.2), 1):  # machine speed differs 50% between processes
        slow, base = _windows(rng, level, 0.80)
        fast, _ = _windows(rng, level, 1.15)
        rows += [_row("sinusoidal", r, base, f"g{r}"), _row("slow", r, slow, f"g{r}"), _row("fast", r, fast, f"g{r}")]
    table = _table(tmp_path, rows, ["sinusoidal", "slow", "fast"])
    for method, truth in (("slow", 0.80), ("fast", 1.15)):
        cell = table.cell(method, 64)
        assert not cell.unpaired and "unpaired" not in cell.text
        assert cell.ratio_interval[0] <= truth <= cell.ratio_interval[1] and abs(cell.ratio - truth) < 0.02
    assert "Marked unpaired" not in table.caption


def test_a_newcomer_timed_apart_is_marked_unpaired_with_its_own_interval(tmp_path):
    rng = random.Random(4)
    rows = []
    for r in (1, 2, 3):
        _, base = _windows(rng, 1.0, 1.0)
        rows.append(_row("sinusoidal", r, base, f"g{r}"))
        # the newcomer is slower (0.8x) but ran alone later, on a machine 50% faster: its own process
        slow, _ = _windows(rng, 1.5, 0.80)
        rows.append(_row("slow", r, slow, f"later{r}", paired=False))
    table = _table(tmp_path, rows, ["sinusoidal", "slow"])
    cell = table.cell("slow", 64)
    assert cell.unpaired and cell.text.endswith("unpaired)")
    ours = [{"group": "x", "values": r["series"]["train_wps_windows"]} for r in rows if r["method"] == "slow"]
    base = [{"group": "x", "values": r["series"]["train_wps_windows"]} for r in rows if r["method"] == "sinusoidal"]
    assert cell.ratio_interval == bootstrap.ratio_of_medians_interval(
        bootstrap.value_clusters(ours), bootstrap.value_clusters(base)
    )
    assert "Marked unpaired: timed apart from sinusoidal" in table.caption
    assert "paired windows: a grid point" not in table.caption  # no paired claim left in the caption
    # The same windows without the runner's mark still do not pair: no round shares a process.
    for row in rows:
        row["info"].pop("paired", None)
    assert _table(tmp_path / "again", rows, ["sinusoidal", "slow"]).cell("slow", 64).unpaired


def test_rows_of_another_run_folder_never_pair_with_this_runs_baseline(tmp_path):
    rng = random.Random(5)
    ours = [_row("sinusoidal", r, _windows(rng, 1.0, 1.0)[1], f"g{r}", run_id="run-a") for r in (1, 2)]
    theirs = [_row("alibi", r, _windows(rng, 1.0, 0.9)[0], f"h{r}", run_id="run-b") for r in (1, 2)]
    run_a = write_run(tmp_path / "a", ours, metrics=["train_wps"], methods=["sinusoidal", "alibi"])
    run_b = write_run(tmp_path / "b", theirs, metrics=["train_wps"], methods=["sinusoidal", "alibi"])
    (table,) = metric_tables(rowsmod.load_runs([run_a, run_b], find_task=find_task), "efficiency", metrics=["train_wps"])
    assert table.cell("alibi", 64).unpaired and "unpaired" in table.cell("alibi", 64).text


def test_a_folder_without_run_json_resumes_as_it_is(tmp_path):
    # nobody can say which method joined (an old run, or run.json lost): nothing is re-measured
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal", "rotary"], 2)
    (run_dir / "run.json").unlink()
    todo = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir).todo
    assert [(c.id, r) for c, r in todo] == [("alibi/n=1", 1), ("alibi/n=1", 2)]

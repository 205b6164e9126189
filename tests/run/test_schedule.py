"""Interleaved rounds: the schedule, one process and one row per round, resume and retry per
round, merged rows, paired ratios with bootstrap intervals (a planted drift cancels), and the
tables' ``0.98x ±0.01`` cells with their CSV bounds and chart error bars."""

import json
import math
import random
import statistics

import pytest

from posbench.cli import app as cli
from posbench.report import bootstrap, render
from posbench.report import numbers as fmt
from posbench.report import rows as rowsmod
from posbench.report.tabulate import metric_tables
from posbench.run import runner
from posbench.run import suite as suitemod
from posbench.run.options import RunOptions
from posbench.run.schedule import jobs, plan_rounds, schedule
from posbench.store.meta import read_run_meta
from posbench.store.run_rows import case_rows, merge_rounds, read_rows
from posbench.tasks import find as find_task
from tests.helpers.ratios import recovers_planted_ratio
from tests.helpers.report_rows import write_run
from tests.helpers.suites import make_suite


def _ids(todo):
    return [(c.id, r) for c, r in todo]


# -- schedule, fresh processes, per-round rows --------------------------------------------------


def test_schedule_interleaves_methods_round_by_round_per_grid_point(tmp_path):
    path = make_suite(tmp_path, ["sinusoidal", "rotary", "alibi"], grid="[1, 2]", rounds=3)
    suite = suitemod.resolve(suitemod.load(path), "default")
    todo = schedule(suite.cases("cpu"))
    # Per point: round 1 of every method, then round 2 starting one method later, then round 3.
    m1 = ["sinusoidal/n=1", "rotary/n=1", "alibi/n=1"]
    expected = [(m1[i], 1) for i in (0, 1, 2)] + [(m1[i], 2) for i in (1, 2, 0)] + [(m1[i], 3) for i in (2, 0, 1)]
    assert _ids(todo)[:9] == expected
    assert _ids(todo)[9:12] == [("sinusoidal/n=2", 1), ("rotary/n=2", 1), ("alibi/n=2", 1)]
    assert len(todo) == 18
    # Without the setting every case runs once, in suite order.
    plain = suitemod.resolve(suitemod.load(make_suite(tmp_path, ["sinusoidal", "rotary"])), "default")
    assert _ids(schedule(plain.cases("cpu"))) == [("sinusoidal/n=1", 1), ("rotary/n=1", 1)]


@pytest.mark.subprocess
def test_each_round_is_a_fresh_process_and_a_row_and_progress_counts_rounds(tmp_path):
    path = make_suite(tmp_path, ["sinusoidal", "rotary"], rounds=2)
    suite = suitemod.resolve(suitemod.load(path), "default")
    seen = []
    result = runner.run_suite(
        suite,
        runner.RunOptions(
            "cpu", tmp_path / "res", progress=False, on_row=lambda row, i, n: seen.append((row["case_id"], row["round"], i, n))
        ),
    )
    assert seen == [("sinusoidal/n=1", 1, 1, 4), ("rotary/n=1", 1, 2, 4), ("rotary/n=1", 2, 3, 4), ("sinusoidal/n=1", 2, 4, 4)]
    stored = read_rows(result.run_dir / "cases.jsonl")
    assert [(r["case_id"], r["round"]) for r in stored] == [s[:2] for s in seen]
    assert len({r["metrics"]["pid"] for r in stored}) == 4  # one worker process per case and round
    # The run's rows: one per case, rounds merged, every round's value kept.
    merged = {r["case_id"]: r for r in result.rows}
    assert set(merged) == {"sinusoidal/n=1", "rotary/n=1"}
    sin = merged["sinusoidal/n=1"]
    assert sin["metrics"]["value"] == 1000 and sin["metrics"]["n_rounds"] == 2
    assert sin["series"]["value_by_round"] == [1000, 1000] and len(set(sin["series"]["pid_by_round"])) == 2
    # env.json says how busy the machine was at the start and at the end of the run.
    env = json.loads((result.run_dir / "env.json").read_text())
    assert set(env["machine"]) == {"start", "end"}
    for state in env["machine"].values():
        assert {"load_avg", "busy_processes", "n_busy_processes", "cpu_freq", "busy"} <= set(state)


@pytest.mark.subprocess
def test_resume_mid_round_runs_each_remaining_round_once(tmp_path, capsys):
    flag = tmp_path / "interrupted.flag"
    # rotary interrupts the runner in its first round: sinusoidal's round 1 is done, the round is not.
    path = make_suite(
        tmp_path, ["sinusoidal", "rotary", "alibi"], by_method={"rotary": "interrupt_once"}, flag_file=str(flag), rounds=2
    )
    args = ["--suite", str(path), "--device", "cpu", "--results", str(tmp_path / "res"), "--quiet"]
    assert cli.main(args) == cli.EXIT_INTERRUPTED
    assert "interrupted: 1 of 6 cases finished" in capsys.readouterr().err
    run_dir = next((tmp_path / "res" / "t").iterdir())
    first = read_rows(run_dir / "cases.jsonl")
    assert [(r["case_id"], r["round"]) for r in first] == [("sinusoidal/n=1", 1)]

    assert cli.main(args) == 0
    stored = read_rows(run_dir / "cases.jsonl")
    assert [(r["case_id"], r["round"]) for r in stored] == [
        ("sinusoidal/n=1", 1),
        ("rotary/n=1", 1),
        ("alibi/n=1", 1),
        ("rotary/n=1", 2),
        ("alibi/n=1", 2),
        ("sinusoidal/n=1", 2),
    ]
    assert stored[0] == first[0] and all(r["status"] == "ok" for r in stored)
    assert "5 case(s) run, 1 already done" in capsys.readouterr().out
    # A third call finds every round done.
    suite = suitemod.resolve(suitemod.load(path), "default")
    plan = plan_rounds(suite, RunOptions("cpu", tmp_path / "res"), run_dir.name, run_dir)
    todo, done = plan.todo, plan.done
    assert todo == [] and len(done) == 6


@pytest.mark.subprocess
def test_retry_failed_reruns_only_the_failed_round(tmp_path):
    path = make_suite(tmp_path, ["sinusoidal", "rotary"], rounds=3)
    suite = suitemod.resolve(suitemod.load(path), "default")
    result = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", progress=False))
    cases = result.run_dir / "cases.jsonl"
    lines = cases.read_text().splitlines()
    broken = [json.loads(line) for line in lines]
    target = next(i for i, r in enumerate(broken) if (r["case_id"], r["round"]) == ("rotary/n=1", 2))
    broken[target].update(status="error", message="ValueError: boom")
    cases.write_text("".join(json.dumps(r) + "\n" for r in broken))
    merged = case_rows(read_rows(cases))["rotary/n=1"]
    assert merged["status"] == "error" and merged["message"] == "round 2: ValueError: boom"
    assert merged["series"]["value_by_round"] == [1000, None, 1000] and merged["metrics"]["n_rounds"] == 2

    todo = plan_rounds(suite, RunOptions("cpu", tmp_path / "res", retry_failed=True), result.run_id, result.run_dir).todo
    assert _ids(todo) == [("rotary/n=1", 2)]
    again = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", retry_failed=True, progress=False))
    assert again.ran == 1
    assert {r["case_id"]: r["status"] for r in again.rows} == {"sinusoidal/n=1": "ok", "rotary/n=1": "ok"}


def test_merge_rounds_takes_medians_and_keeps_single_rows_as_they_are():
    def row(r, value, status="ok"):
        return {
            "case_id": "a/n=1",
            "method": "a",
            "status": status,
            "params": {"n": 1},
            "round": r,
            "metrics": {"value": value, "mem": 10},
            "series": {"w": [r]},
            "duration_s": 1.0,
            "started_at": f"2026-01-01T00:00:0{r}+00:00",
            "message": "",
            "traceback": "",
        }

    merged = merge_rounds([row(3, 30.0), row(1, 10.0), row(2, 50.0)])
    assert merged["metrics"] == {"value": 30.0, "mem": 10, "n_rounds": 3}
    assert merged["series"]["value_by_round"] == [10.0, 50.0, 30.0] and merged["duration_s"] == 3.0
    assert merged["series"]["w"] == [1]  # the first round's own series
    single = row(1, 10.0)
    assert merge_rounds([single]) == single
    # The latest row per round wins (a retried round), then rounds merge.
    retried = dict(row(2, 70.0), started_at="2026-01-01T00:00:09+00:00")
    out = case_rows([row(1, 10.0), row(2, 50.0), retried])["a/n=1"]
    assert out["series"]["value_by_round"] == [10.0, 70.0]


# -- paired ratios and the bootstrap ----------------------------------------------------------


def _drifting_rounds(n=8, ratio=0.9, seed=1):
    """Baseline and method speeds per round under a machine drift of +-20% between rounds
    (shared by the two methods of a round) and 0.3% independent noise per measurement."""
    rng = random.Random(seed)
    drift = [1.0 + 0.2 * (1 if r % 2 else -1) * rng.random() for r in range(n)]
    base = [1000.0 * d * (1 + rng.gauss(0, 0.003)) for d in drift]
    method = [1000.0 * ratio * d * (1 + rng.gauss(0, 0.003)) for d in drift]
    return method, base, drift


def test_paired_ratio_recovers_a_planted_ratio_under_20_percent_drift():
    method, base, drift = _drifting_rounds()
    interval = recovers_planted_ratio(method, base, drift, pairs=8, tol=0.005, width=0.02)
    # Unpaired (medians of each side) the drift stays in: far wider.
    wide = bootstrap.ratio_of_medians_interval(method, base)
    assert wide[1] - wide[0] > 5 * (interval[1] - interval[0])


def test_bootstrap_interval_basics():
    assert bootstrap.bootstrap_interval([1.0]) is None and bootstrap.bootstrap_interval([]) is None
    xs = [0.97, 0.98, 0.99, 1.0, 1.01]
    lo, hi = bootstrap.bootstrap_interval(xs)
    assert lo <= statistics.median(xs) <= hi and 0.97 <= lo and hi <= 1.01
    assert bootstrap.bootstrap_interval(xs) == (lo, hi)  # seeded: the same rows give the same interval
    lo2, hi2 = bootstrap.bootstrap_interval([x * 10 - 9 for x in xs])  # ten times the spread
    assert hi2 - lo2 > 5 * (hi - lo)
    with pytest.raises(ValueError, match="level must be in"):
        bootstrap.bootstrap_interval(xs, level=1.5)
    # rounds without a value (None, NaN) or a zero baseline drop out of the pairs
    assert bootstrap.paired_ratios([2.0, None, 3.0, float("nan"), 5.0], [1.0, 1.0, 0.0, 1.0, 2.0]) == [2.0, 2.5]
    assert bootstrap.paired_ratio([], []) == (None, None, 0)


def _round_rows(method, base, run_id="run-r"):
    rows = []
    for name, values in (("sinusoidal", base), ("alibi", method)):
        for r, v in enumerate(values, 1):
            rows.append(
                {
                    "case_id": f"{name}/seq_len=64",
                    "suite": "efficiency",
                    "task": "efficiency",
                    "method": name,
                    "params": {"seq_len": 64},
                    "status": "ok",
                    "message": "",
                    "metrics": {"train_wps": v},
                    "series": {},
                    "info": {},
                    "settings": {"rounds": len(values)},
                    "device": "cpu",
                    "profile": "cpu",
                    "run_id": run_id,
                    "started_at": f"2026-01-01T00:{r:02d}:00+00:00",
                    "duration_s": 1.0,
                    "posbench_version": "x",
                    "git_commit": "abc",
                    "traceback": "",
                    "round": r,
                }
            )
    return rows


def test_tables_show_the_paired_ratio_with_its_interval_csv_bounds_and_chart_error_bars(tmp_path):
    method, base, _ = _drifting_rounds(n=6, ratio=0.98)
    run = write_run(tmp_path, _round_rows(method, base), metrics=["train_wps"], methods=["sinusoidal", "alibi"])
    (table,) = metric_tables(rowsmod.load_runs(run, find_task=find_task), "efficiency", metrics=["train_wps"])
    cell = table.cell("alibi", 64)
    ratio, interval, _ = bootstrap.paired_ratio(method, base)
    assert cell.ratio == ratio and cell.ratio_interval == interval and ratio == pytest.approx(0.98, abs=0.005)
    # one estimator per cell: the value shown is the baseline's median x the paired ratio; the
    # method's own median is kept beside it (table.csv's median column)
    assert cell.median == statistics.median(method) and cell.value == pytest.approx(statistics.median(base) * ratio)
    assert cell.text.endswith(f"(0.98x {fmt.interval_text(ratio, interval)})")
    assert "median of per-round ratios" in table.caption and "busy" not in table.caption
    csv_rows = render.cells_csv([table]).splitlines()
    assert csv_rows[0].split(",")[4:7] == ["ratio", "ratio_lo", "ratio_hi"]
    line = next(r for r in csv_rows if r.startswith("train_wps,alibi,"))
    assert line.split(",")[5:7] == [f"{interval[0]:.6g}", f"{interval[1]:.6g}"]
    base_line = next(r for r in csv_rows if r.startswith("train_wps,sinusoidal,"))
    assert base_line.split(",")[4:7] == ["1", "", ""]  # the baseline against itself: 1, no interval
    assert table.cell("sinusoidal", 64).text.endswith("(1.00x)")

    from posbench.report.charts import metric_chart

    fig = metric_chart(table)
    bars = {c.get_gid(): c for c in fig.axes[0].collections}
    (segment,) = bars["errorbar:alibi"].get_segments()  # one bar, at L=64: value x bounds / ratio
    assert segment[:, 1] == pytest.approx([cell.value * b / ratio for b in interval])
    assert "errorbar:sinusoidal" not in bars  # the baseline against itself: no interval, no bar


def test_a_busy_machine_is_named_in_the_caption(tmp_path):
    method, base, _ = _drifting_rounds(n=3)
    busy = {"cpu": "Test CPU", "machine": {"start": {"busy": True}, "end": {"busy": False}}}
    run = write_run(tmp_path, _round_rows(method, base), env=busy, metrics=["train_wps"])
    (table,) = metric_tables(rowsmod.load_runs(run, find_task=find_task), "efficiency", metrics=["train_wps"])
    assert "Measured on a busy machine" in table.caption


# Paired means paired: a method joining a finished timed run re-measures the grid points it joins
# with every method (or, ``--unpaired``, runs alone and its ratios say so); a table pairs windows
# only within one process and ratios only within one run folder, and marks the rest unpaired.


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


def _grown(tmp_path, methods, rounds, **settings):
    """The suite of ``_finished_folder`` with ``methods`` now (the profile grew): a method the run
    did not hold joins without ``--methods`` naming a subset."""
    return suitemod.resolve(suitemod.load(make_suite(tmp_path, methods, rounds=rounds, **settings)), "default")


@pytest.mark.parametrize("pairing", ["rounds", "windows"])
def test_a_joining_method_re_measures_its_grid_point_with_every_method(tmp_path, pairing):
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal", "rotary"], 2, pairing=pairing)
    grown = _grown(tmp_path, ["sinusoidal", "rotary", "alibi"], 2, pairing=pairing)
    todo = plan_rounds(grown, RunOptions("cpu", run_dir.parent), "r", run_dir).todo
    # every (case, round) of the point again, alibi among them, in the schedule's order
    assert sorted((c.id, r) for c, r in todo) == sorted(
        (f"{m}/n=1", r) for m in ("sinusoidal", "rotary", "alibi") for r in (1, 2)
    )
    if pairing == "windows":  # one process per round holds all three
        assert [sorted(c.method for c in cases) for cases, _r in jobs(todo)] == [["alibi", "rotary", "sinusoidal"]] * 2
    # --methods naming every method there: the same paired join
    named = RunOptions("cpu", run_dir.parent, methods=["sinusoidal", "rotary", "alibi"])
    assert sorted(_ids(plan_rounds(suite, named, "r", run_dir).todo)) == sorted(_ids(todo))
    # --methods alibi means alibi (issue 66): the others are kept, not measured again, and alibi
    # runs alone there, its (case, round)s unpaired, as with --unpaired
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir)
    assert _ids(plan.todo) == [("alibi/n=1", 1), ("alibi/n=1", 2)]
    assert plan.lone == {("alibi/n=1", 1), ("alibi/n=1", 2)} and [j.paired for j in plan.joins] == [False]
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
    # alibi joins with every method named (--methods sinusoidal,rotary,alibi): a paired join
    every = ("sinusoidal", "rotary", "alibi")
    joined = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", methods=every, progress=False))
    assert joined.ran == 3  # sinusoidal and rotary again, with alibi, in one process
    rows = read_rows(joined.run_dir / "cases.jsonl")[2:]
    assert len({r["metrics"]["pid"] for r in rows}) == 1 and all(r["info"]["group_size"] == "3" for r in rows)
    assert all("paired" not in r["info"] for r in rows)
    alone = runner.run_suite(suite, runner.RunOptions("cpu", tmp_path / "res", methods=("fire",), unpaired=True, progress=False))
    assert alone.ran == 1
    (row,) = read_rows(alone.run_dir / "cases.jsonl")[5:]
    assert row["method"] == "fire" and row["info"]["paired"] is False
    # run.json recorded each join when it started, and lists every method that ran
    meta = read_run_meta(alone.run_dir)
    assert [(j.methods, j.points, j.paired) for j in meta.joins] == [(["alibi"], [{"n": 1}], True), (["fire"], [{"n": 1}], False)]
    assert meta.methods == ["sinusoidal", "rotary", "alibi", "fire"]


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


# A join is a property of the run: run.json records it when it starts (which methods joined, at
# which grid points, when, paired or not), so a resume finishes it as it began; run.json lists the
# methods that ran, so a method of the profile that never ran joins like any other.

JOIN_AT = "2026-01-02T00:00:00+00:00"


def _stopped_join(tmp_path, paired=True):
    """sinusoidal and rotary finished 3 rounds at n=1 on Jan 1; alibi joined on Jan 2 and the join
    was stopped after round 1 (round 1 of all three re-measured, rounds 2-3 of the two still old)."""
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal", "rotary"], 3, pairing="rounds")
    rows = [json.loads(line) for line in (run_dir / "cases.jsonl").read_text().splitlines()]
    for row in rows:
        row["started_at"] = f"2026-01-01T00:0{row['round']}:00+00:00"
    for i, m in enumerate(["sinusoidal", "rotary", "alibi"] if paired else ["alibi"]):
        row = {"case_id": f"{m}/n=1", "method": m, "params": {"n": 1}, "status": "ok", "metrics": {"value": 1.0}}
        rows.append(dict(row, round=1, started_at=f"2026-01-02T00:00:0{i + 1}+00:00"))
        if not paired:
            rows[-1]["info"] = {"paired": False}
    (run_dir / "cases.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    join = {"methods": ["alibi"], "points": [{"n": 1}], "started_at": JOIN_AT, "paired": paired}
    meta = json.loads((run_dir / "run.json").read_text())
    meta.update(methods=["sinusoidal", "rotary", "alibi"], joins=[join], format=2)
    (run_dir / "run.json").write_text(json.dumps(meta))
    return suite, run_dir


def test_a_join_stopped_after_round_1_resumes_paired(tmp_path):
    suite, run_dir = _stopped_join(tmp_path)
    # the command printed at the stop: --methods alibi again
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir)
    # rounds 2 and 3 of every method at the point, timed together again (not alibi's alone
    # against the old rows), in the schedule's order
    assert _ids(plan.todo) == [(f"{m}/n=1", r) for r, ms in ((2, "231"), (3, "312")) for m in _names(ms)]
    assert not plan.lone
    assert [join.started_at for join in plan.joins] == [JOIN_AT]  # the same join, not a new one
    # once every round of the point is measured after the join started, nothing is left
    with (run_dir / "cases.jsonl").open("a") as f:
        for c, r in plan.todo:
            row = {"case_id": c.id, "method": c.method, "params": {"n": 1}, "status": "ok", "metrics": {"value": 1.0}}
            f.write(json.dumps(dict(row, round=r, started_at=f"2026-01-03T00:00:0{r}+00:00")) + "\n")
    assert plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir).todo == []


def _names(order):
    return [("sinusoidal", "rotary", "alibi")[int(i) - 1] for i in order]


def test_an_unpaired_join_stopped_and_resumed_stays_unpaired(tmp_path):
    suite, run_dir = _stopped_join(tmp_path, paired=False)
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir)
    assert _ids(plan.todo) == [("alibi/n=1", 2), ("alibi/n=1", 3)]
    assert plan.lone == {("alibi/n=1", 2), ("alibi/n=1", 3)}  # its rows say info.paired: false


def test_a_join_that_cannot_be_re_measured_is_marked_unpaired(tmp_path):
    suite, run_dir = _stopped_join(tmp_path)
    # rotary's rows are at the point but the suite no longer holds it: alibi's rounds 2-3 would
    # be timed against rotary's old rows, so they run alone and say so
    suite = suitemod.resolve(suitemod.load(make_suite(tmp_path, ["sinusoidal"], rounds=3, pairing="rounds")), "default")
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir)
    assert _ids(plan.todo) == [("alibi/n=1", 2), ("alibi/n=1", 3)]
    assert plan.lone == {("alibi/n=1", 2), ("alibi/n=1", 3)}


def test_a_join_is_recorded_when_it_starts_and_run_json_lists_the_methods_that_ran(tmp_path):
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal", "rotary"], 2)
    grown = _grown(tmp_path, ["sinusoidal", "rotary", "alibi"], 2)
    plan = plan_rounds(grown, RunOptions("cpu", run_dir.parent), "r", run_dir)
    (join,) = plan.joins
    assert (join.methods, join.points, join.paired) == (["alibi"], [{"n": 1}], True)
    meta = plan.run_meta("cpu", "r")
    assert meta.methods == ["sinusoidal", "rotary", "alibi"] and meta.joins == [join]
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"], unpaired=True), "r", run_dir)
    assert [j.paired for j in plan.joins] == [False]
    # a fresh run of a narrowed --methods: run.json lists what ran, not the suite's whole list
    fresh = plan_rounds(suite, RunOptions("cpu", tmp_path / "res", methods=["rotary"]), "f", tmp_path / "res" / "t" / "f")
    assert fresh.run_meta("cpu", "f").methods == ["rotary"] and fresh.joins == []


def test_a_profile_method_that_never_ran_joins_like_any_other(tmp_path):
    # run.json written before it listed the methods that ran (format 1) names rotary, the
    # profile's, though only sinusoidal ran: rotary re-measures the point with it
    suite, run_dir = _finished_folder(tmp_path, ["sinusoidal"], 2)
    meta = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps(dict(meta, methods=["sinusoidal", "rotary"], format=1)))
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent), "r", run_dir)
    assert sorted(_ids(plan.todo)) == sorted((f"{m}/n=1", r) for m in ("sinusoidal", "rotary") for r in (1, 2))
    assert [j.methods for j in plan.joins] == [["rotary"]]
    # and a run.json of today that lists only sinusoidal as run does the same
    (run_dir / "run.json").write_text(json.dumps(dict(meta, methods=["sinusoidal"], format=2)))
    assert sorted(_ids(plan_rounds(suite, RunOptions("cpu", run_dir.parent), "r", run_dir).todo)) == sorted(_ids(plan.todo))


SEVEN = ["sinusoidal", "rotary", "t5_bias", "alibi", "nope", "fire", "sandwich"]


@pytest.mark.parametrize("pairing", ["rounds", "windows"])
def test_methods_a_b_on_a_seven_method_folder_plans_only_their_new_cases(tmp_path, pairing):
    """Issue 66: ``--methods sinusoidal,alibi,sqrt_bias`` on a folder of seven methods planned 24
    cases, measuring all seven again. Now ``--methods`` means these methods: a held one that is
    done runs nothing, a newcomer runs its own cases (with the other newcomers: one process per
    round with windows), unpaired against the seven kept as they were."""
    suite, run_dir = _finished_folder(tmp_path, SEVEN, 2, pairing=pairing)
    plan = plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi", "xpos", "kerple_log"]), "r", run_dir)
    assert sorted(_ids(plan.todo)) == sorted((f"{m}/n=1", r) for m in ("xpos", "kerple_log") for r in (1, 2))
    assert plan.lone == set(_ids(plan.todo))  # their ratios against the seven are marked unpaired
    if pairing == "windows":
        assert [sorted(c.method for c in cases) for cases, _r in jobs(plan.todo)] == [["kerple_log", "xpos"]] * 2
    (join,) = plan.joins
    assert (join.methods, join.paired) == (["xpos", "kerple_log"], False)
    # a method of the folder named alone: done, nothing to run
    assert plan_rounds(suite, RunOptions("cpu", run_dir.parent, methods=["alibi"]), "r", run_dir).todo == []

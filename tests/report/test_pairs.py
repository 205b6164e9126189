"""Any two methods' ratio formed as the table forms a cell's ratio to its baseline: the figures a
table prints (the floor's in square brackets) and those of a table with the other method as its
baseline, from the same rows."""

from __future__ import annotations

from pathlib import Path

from posbench.report.pairs import paired_cell
from posbench.report.rows import load_runs
from posbench.report.tabulate import metric_tables, run_tables
from posbench.tasks import find as find_task

EFFICIENCY = Path(__file__).resolve().parents[2] / "results" / "published" / "efficiency" / "cpu-long-cpu-b8f9da88"


def test_a_pair_equals_the_tables_own_ratio_for_that_pair():
    runs = load_runs(EFFICIENCY, find_task=find_task)
    speed = next(t for t in run_tables(runs) if t.metric == "train_wps")
    for method in ("alibi", "path", "swan"):
        cell = paired_cell(runs.rows, speed, method, "nope", 2048)
        assert [cell.ratio, *cell.ratio_interval] == speed.extra["floor_ratios"][f"{method}@2048"]
        assert not cell.unpaired and not cell.ratio_interval[0] <= 1.0 <= cell.ratio_interval[1]
    # a pair no column shows: as the table whose baseline is t5_bias prints it
    (by_t5,) = metric_tables(runs, "efficiency", "t5_bias", "seq_len", ["train_wps"])
    cell = paired_cell(runs.rows, speed, "alibi", "t5_bias", 1024)
    want = by_t5.cell("alibi", 1024)
    assert (cell.ratio, cell.ratio_interval, cell.text) == (want.ratio, want.ratio_interval, want.text)
    assert paired_cell(runs.rows, speed, "alibi", "no_such_method", 1024) is None
    assert paired_cell(None, speed, "alibi", "nope", 1024) is None  # no rows: nothing to pair

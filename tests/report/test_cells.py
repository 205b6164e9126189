"""A table cell: its value and its ratio to the baseline come from one estimator (issue 66, item 2),
and a memory cell carries its resolution (item 3)."""

from __future__ import annotations

import csv
import io

import pytest

from posbench.report import render, resolution
from posbench.report import rows as rowsmod
from posbench.report.charts import metric_chart
from posbench.report.tabulate import metric_tables
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, write_run

BASE = [1000.0, 800.0, 1150.0, 900.0, 1050.0]  # sinusoidal per round: median 1000
# alibi per round: 2% faster in three rounds, 20% slower in two, so its own median (840) is below
# sinusoidal's while the median of its per-round ratios (1.02) is above: the two estimators disagree
RATIOS = [0.80, 1.02, 1.02, 1.02, 0.80]


def _rounds_run(root, metric="train_wps", base=BASE, ratios=RATIOS):
    rows = []
    for method, values in (("sinusoidal", base), ("alibi", [b * r for b, r in zip(base, ratios)])):
        for r, value in enumerate(values, 1):
            row = base_row("efficiency", "efficiency", method, {"seq_len": 64}, "r", round=r)
            row["metrics"] = {metric: value}
            rows.append(row)
    return write_run(root, rows, metrics=[metric])


def test_a_cells_value_and_ratio_point_the_same_way(tmp_path):
    runs = rowsmod.load_runs(_rounds_run(tmp_path), find_task=find_task)
    (table,) = metric_tables(runs, "efficiency", metrics=["train_wps"])
    alibi, sinusoidal = table.cell("alibi", 64), table.cell("sinusoidal", 64)
    assert alibi.median == pytest.approx(840.0) and alibi.ratio == pytest.approx(1.02)
    # the value shown is sinusoidal's median x alibi's paired ratio: above sinusoidal, as its ratio says
    assert alibi.value == pytest.approx(1000.0 * alibi.ratio) and alibi.value > sinusoidal.value == 1000.0
    assert alibi.text.startswith("1.02k (1.02x ")
    assert "One estimator per cell: a paired cell's value is sinusoidal's median x its paired ratio" in table.caption
    # table.csv keeps the row's own median beside the value shown
    line = next(r for r in csv.DictReader(io.StringIO(render.cells_csv([table]))) if r["method"] == "alibi")
    assert float(line["median"]) == pytest.approx(840.0) and float(line["value"]) == pytest.approx(alibi.value)
    # the bar chart: the taller bar is the one whose ratio says faster
    fig = metric_chart(table)
    heights = {p.get_gid(): p.get_height() for p in fig.axes[0].patches if (p.get_gid() or "").startswith("method:")}
    assert heights["method:alibi"] > heights["method:sinusoidal"]


def test_a_cell_without_a_paired_ratio_shows_its_own_median(tmp_path):
    # one round each: the ratio divides the two medians, which the cell shows
    runs = rowsmod.load_runs(_rounds_run(tmp_path, base=BASE[:1], ratios=[0.8]), find_task=find_task)
    (table,) = metric_tables(runs, "efficiency", metrics=["train_wps"])
    cell = table.cell("alibi", 64)
    assert cell.value == cell.median == 800.0 and cell.ratio == pytest.approx(0.8) and cell.ratio_interval is None
    assert "One estimator per cell" not in table.caption


def test_a_memory_cell_carries_its_resolution(tmp_path):
    mib = 1 << 20
    runs = rowsmod.load_runs(_rounds_run(tmp_path, "peak_mem_train_bytes", base=[400 * mib], ratios=[1.01]), find_task=find_task)
    (table,) = metric_tables(runs, "efficiency", metrics=["peak_mem_train_bytes"])
    cell = table.cell("alibi", 64)
    assert cell.resolution == resolution.band(cell.value, "cpu")
    assert cell.resolution[1] - cell.resolution[0] == pytest.approx(0.05 * cell.value)  # 5% beats 8 MiB here
    assert table.resolution == "max(5%, 8 MiB)"
    assert "a difference under max(5%, 8 MiB) is within its resolution" in table.caption
    (speed,) = metric_tables(
        rowsmod.load_runs(_rounds_run(tmp_path / "s"), find_task=find_task), "efficiency", metrics=["train_wps"]
    )
    assert speed.cell("alibi", 64).resolution is None and speed.resolution == ""

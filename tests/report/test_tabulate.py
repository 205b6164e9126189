"""Metric tables' captions say what their cells hold, and only what applies to them (issue 66)."""

from __future__ import annotations

from posbench.report import rows as rowsmod
from posbench.report.tabulate import metric_tables
from posbench.tasks import find as find_task
from tests.helpers.report_rows import base_row, write_run

BUSY = {"cpu": "Test CPU", "machine": {"start": {"busy": True}, "end": {"busy": False}}}


def _run(tmp_path, rounds=3):
    rows = []
    for method, speed in (("sinusoidal", 1000.0), ("alibi", 900.0)):
        for r in range(1, rounds + 1):
            row = base_row("efficiency", "efficiency", method, {"seq_len": 64}, "r", round=r)
            row["metrics"] = {"train_wps": speed * (1 + 0.1 * r), "peak_mem_train_bytes": 400 << 20}
            rows.append(row)
    return write_run(tmp_path, rows, env=BUSY, metrics=["train_wps", "peak_mem_train_bytes"])


def test_a_busy_machine_is_said_under_speeds_only(tmp_path):
    runs = rowsmod.load_runs(_run(tmp_path), find_task=find_task)
    speed, memory = metric_tables(runs, "efficiency", metrics=["train_wps", "peak_mem_train_bytes"])
    assert "Measured on a busy machine" in speed.caption and "speeds are noisier" in speed.caption
    assert "busy" not in memory.caption  # a busy machine does not move a peak of memory


def test_captions_say_how_an_interval_is_printed(tmp_path):
    runs = rowsmod.load_runs(_run(tmp_path), find_task=find_task)
    speed, memory = metric_tables(runs, "efficiency", metrics=["train_wps", "peak_mem_train_bytes"])
    assert speed.cell("alibi", 64).ratio_interval is not None
    assert (
        "then its bootstrap 95% interval: ±h, its half-width, where it is symmetric to the two decimals printed, else [low, high]."
        in speed.caption
    )
    assert "half the width" not in speed.caption

"""The ratio of any two methods of a table, formed exactly as the table forms a cell's ratio to its
baseline (``posbench.report.cells.metric_cell``): with paired windows or interleaved rounds, the
median of per-window (per-round) ratios and its bootstrap 95% interval; timed apart, the ratio of
medians, marked unpaired. The findings (``posbench.cli.findings``) ask for pairs a page's tables
do not show as a column (ALiBi against T5 bias), and read the figures the page prints for the
ones they do.
"""

from __future__ import annotations

from typing import Any

from posbench.report.cells import Baseline, metric_cell, rounds_of
from posbench.report.table import Cell, Table


def _row(rows, cell: Cell) -> Any | None:
    """The row of ``rows`` a table cell was read from (its run and case), None when absent."""
    if cell.case_id is None:
        return None
    for r in rows.itertuples(index=False):
        if r.run_id == cell.run_id and r.case_id == cell.case_id:
            return r
    return None


def paired_cell(rows, table: Table, method: str, against: str, column) -> Cell | None:
    """``method``'s cell of ``table`` at ``column`` as it would read with ``against`` as the
    baseline (its ``ratio``, ``ratio_interval`` and ``unpaired``), from ``rows`` (the run's rows
    the table was built from); None where either cell has no finished row with the metric."""
    mine, theirs = table.cell(method, column), table.cell(against, column)
    if rows is None or mine.status != "ok" or theirs.status != "ok":
        return None
    ours, base = _row(rows, mine), _row(rows, theirs)
    if ours is None or base is None or not isinstance(base.metrics, dict) or base.metrics.get(table.metric) is None:
        return None
    scratch = Table(table.spec, key=table.key, title=table.title)  # metric_cell notes the spread kind on it
    value = float(base.metrics[table.metric])
    apart = ours.run_id != base.run_id  # rows of two runs: never paired
    cell = metric_cell(ours, scratch, Baseline(value, rounds_of(base, table.metric), base, apart))
    return cell if cell.ratio is not None else None

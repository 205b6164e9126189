"""A metric's cell in a table of methods: its value, the spread its row holds, its ratio to the baseline.

The ratio is to the baseline's row at the same grid point of the same run (else of another run,
marked unpaired). With interleaved rounds or paired windows it is the median of per-round (or
per-window) ratios with a bootstrap 95% interval; rows timed apart divide two medians instead.
One estimator per cell: where the ratio is paired, the value shown is the baseline's median x
that ratio, so a value and its ratio never point opposite ways (the row's own median stays in
``Cell.median``, table.csv and rows.csv). Memory cells carry the measurement's resolution
(``posbench.report.resolution``), so a difference within it is never ranked.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from posbench.core.task import SEED_CI_SUFFIXES
from posbench.report import bootstrap, resolution
from posbench.report import numbers as fmt
from posbench.report.grouping import is_number
from posbench.report.table import SPREAD_MIN_MAX, SPREAD_SEED_CI, SPREAD_STD, Cell, Table
from posbench.store.row import by_round, by_window, spread_in

UNPAIRED_NOTE = (
    "Marked unpaired: timed apart from {base} (another process, pass or run folder: a method that "
    "joined a finished run with --unpaired, or rows of several runs), so the ratio divides the two "
    "medians, its interval resamples each side on its own, and it claims no pairing."
)
PAIRED_VALUE_NOTE = (
    "One estimator per cell: a paired cell's value is {base}'s median x its paired ratio, so value and "
    "ratio agree in direction (each method's own median is the median column of table.csv, and rows.csv)."
)


def spread_of(metrics: dict, name: str, value: float | None, table: Table | None) -> tuple[float, float] | None:
    """What the row says about the spread of ``name``: ``<name>_min``/``<name>_max`` (windows,
    rounds), else ``value ± <name>_std`` (seeds); None when it says nothing. Which one it was goes
    to ``table.spread`` (the table's charts name it under their error bars)."""
    lo, hi = (metrics.get(name + s) for s in SEED_CI_SUFFIXES) if isinstance(metrics, dict) else (None, None)
    if is_number(lo) and is_number(hi):  # several seeds: the interval of their mean
        if table is not None:
            table.spread = SPREAD_SEED_CI
        return float(lo), float(hi)
    spread = spread_in(metrics, name)
    if spread is None:
        return None
    if is_number(spread.lo) and is_number(spread.hi):
        if table is not None:
            table.spread = SPREAD_MIN_MAX
        return float(spread.lo), float(spread.hi)
    if is_number(spread.std) and value is not None:
        if table is not None:
            table.spread = SPREAD_STD
        return value - float(spread.std), value + float(spread.std)
    return None


def rounds_of(r, name: str) -> list | None:
    """The row's per-round values of ``name`` (``series[name + "_by_round"]``), if it has rounds;
    with paired windows each round's windows (``series[name + "_by_window"]``, any number of rounds)."""
    windows = by_window(r.series, name)
    if isinstance(windows, list) and windows:
        return windows
    values = by_round(r.series, name)
    return values if isinstance(values, list) and len(values) >= 2 else None


class Baseline(NamedTuple):
    """The baseline's finished row at one grid point, as the cells of that column divide by it."""

    value: float  # its value of the metric
    rounds: list | None  # its per-round (or per-window) values (``rounds_of``), None without rounds
    row: Any  # the row itself (a named tuple of ``Runs.rows``)
    apart: bool = False  # from another run folder than the cell's row: never paired with it


class Baselines:
    """The finished rows of method ``method`` among ``rows``, per (run, column value) and per column
    value of any run (the first one read): what each cell of one table divides by."""

    def __init__(self, rows, name: str, method: str | None, column: str):
        self.of: dict[tuple, Baseline] = {}  # (run_id or None, column value) -> the baseline's row there
        for r in rows:
            value = r.metrics.get(name)
            if r.method == method and r.status == "ok" and value is not None:
                col = r.params.get(column, r.case_id)
                entry = Baseline(value, rounds_of(r, name), r)
                self.of.setdefault((r.run_id, col), entry)
                self.of.setdefault((None, col), entry._replace(apart=True))

    @property
    def found(self) -> bool:
        return bool(self.of)

    def at(self, run_id: str, col) -> Baseline | None:
        """The baseline of run ``run_id`` at ``col``, else of another run (``apart``), else None."""
        return self.of.get((run_id, col)) or self.of.get((None, col))


def metric_cell(r, table: Table, base: Baseline | None) -> Cell:
    """Row ``r``'s cell in ``table`` (its metric and format), with its ratio to ``base``; a paired
    ratio sets the value shown (module docstring), a memory cell its resolution band."""
    cell = Cell(text="", status=r.status, case_id=r.case_id, run_id=r.run_id, message=str(r.message or ""))
    if r.status != "ok":
        cell.text = fmt.status(r.status)
        return cell
    value = r.metrics.get(table.metric)
    if value is None:
        cell.text = fmt.MISSING
        return cell
    cell.value = cell.median = float(value)
    cell.spread = spread_of(r.metrics, table.metric, cell.value, table)
    if base:
        ours = rounds_of(r, table.metric)
        is_baseline = r.method == base.row.method
        cell.ratio = fmt.ratio_of(cell.value, base.value)  # None for a zero, negative or overflowing pair
        cell.unpaired = not is_baseline and (base.apart or not paired_with(r, base.row, ours, base.rounds))
        if cell.unpaired and cell.ratio is not None:
            cell.ratio_interval = _unpaired_interval(ours, base.rounds)
        elif cell.ratio is not None and ours is not None and base.rounds is not None and not is_baseline:
            # Interleaved rounds: the ratio of each round to the baseline's same round, then the
            # median; drift shared by the round cancels. Needs 2+ pairs for an interval
            # (1.00x against itself: no interval).
            ratio, interval, pairs = bootstrap.paired_ratio(ours, base.rounds)
            if pairs >= 2 and ratio is not None and math.isfinite(ratio) and all(map(math.isfinite, interval or [])):
                cell.ratio, cell.ratio_interval = ratio, interval
                cell.value = base.value * ratio  # the paired estimate: it and the ratio agree
        if cell.ratio is None:
            cell.text = f"{fmt.number(cell.value, table.fmt)} ({fmt.MISSING})"
            return cell
    if table.unit == "bytes":
        cell.resolution = resolution.band(cell.value, getattr(r, "device", None))
    cell.text = fmt.value_with_ratio(cell.value, table.fmt, cell.ratio, cell.ratio_interval, cell.unpaired)
    return cell


def paired_with(row, base_row, ours: list | None, base: list | None) -> bool:
    """Whether ``row``'s values were timed with ``base_row``'s: neither ran alone when it joined a
    finished run (``info.paired: false``, ``schedule.joining``), and paired windows share the
    process of at least one round (a retried round alone still pairs by its medians)."""
    for one in (row, base_row):
        info = getattr(one, "info", None)
        if isinstance(info, dict) and info.get("paired") is False:
            return False
    if ours and base and bootstrap.is_windowed(ours) and bootstrap.is_windowed(base):
        return any(
            isinstance(v, dict) and isinstance(b, dict) and v.get("group") and v.get("group") == b.get("group")
            for v, b in zip(ours, base)
        )
    return True


def _unpaired_interval(ours: list | None, base: list | None) -> tuple[float, float] | None:
    """The interval of the ratio of two sides timed apart (each value a median): each side
    resampled on its own; None without two values a side."""
    if not ours or not base:
        return None
    interval = bootstrap.ratio_of_medians_interval(bootstrap.value_clusters(ours), bootstrap.value_clusters(base))
    return interval if interval is not None and all(map(math.isfinite, interval)) else None

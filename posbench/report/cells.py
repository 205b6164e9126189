"""A metric's cell in a table of methods: its value, the spread its row holds, its ratio to the baseline.

The ratio is to the baseline's row at the same grid point of the same run (else of another run,
marked unpaired). With interleaved rounds or paired windows it is the median of per-round (or
per-window) ratios with a bootstrap 95% interval; rows timed apart divide two medians instead.
"""

from __future__ import annotations

import math
from typing import Optional

from posbench.core.task import SEED_CI_SUFFIXES
from posbench.report import bootstrap
from posbench.report import numbers as fmt
from posbench.report.grouping import is_number
from posbench.report.table import SPREAD_MIN_MAX, SPREAD_SEED_CI, SPREAD_STD, Cell, Table
from posbench.store.row import by_round, by_window, spread_in

UNPAIRED_NOTE = (
    "Marked unpaired: timed apart from {base} (another process, pass or run folder: a method that "
    "joined a finished run with --unpaired, or rows of several runs), so the ratio divides the two "
    "medians, its interval resamples each side on its own, and it claims no pairing."
)


def spread_of(metrics: dict, name: str, value: Optional[float], table: Optional[Table]) -> Optional[tuple[float, float]]:
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


def rounds_of(r, name: str) -> Optional[list]:
    """The row's per-round values of ``name`` (``series[name + "_by_round"]``), if it has rounds;
    with paired windows each round's windows (``series[name + "_by_window"]``, any number of rounds)."""
    windows = by_window(r.series, name)
    if isinstance(windows, list) and windows:
        return windows
    values = by_round(r.series, name)
    return values if isinstance(values, list) and len(values) >= 2 else None


def metric_cell(r, name, kind, baselines, col, is_baseline: bool = False, table: Optional[Table] = None) -> Cell:
    """Row ``r``'s cell of metric ``name`` (format ``kind``) at column ``col``, with its ratio to
    ``baselines[(run_id or None, col)]`` (value, per-round values, the baseline's row)."""
    cell = Cell(text="", status=r.status, case_id=r.case_id, run_id=r.run_id, message=str(r.message or ""))
    if r.status != "ok":
        cell.text = fmt.status(r.status)
        return cell
    value = r.metrics.get(name)
    if value is None:
        cell.text = fmt.MISSING
        return cell
    cell.value = float(value)
    cell.spread = spread_of(r.metrics, name, cell.value, table)
    base = baselines.get((r.run_id, col))
    elsewhere = base is None  # the baseline's row comes from another run folder
    base = base or baselines.get((None, col))
    if base:
        ours = rounds_of(r, name)
        cell.ratio = fmt.ratio_of(cell.value, base[0])  # None for a zero, negative or overflowing pair
        cell.unpaired = not is_baseline and (elsewhere or not paired_with(r, base[2], ours, base[1]))
        if cell.unpaired and cell.ratio is not None:
            cell.ratio, cell.ratio_interval = _unpaired_ratio(cell.value, base[0], ours, base[1])
        elif cell.ratio is not None and ours is not None and base[1] is not None and not is_baseline:
            # Interleaved rounds: the ratio of each round to the baseline's same round, then the
            # median; drift shared by the round cancels. Needs 2+ pairs for an interval
            # (1.00x against itself: no interval).
            ratio, interval, pairs = bootstrap.paired_ratio(ours, base[1])
            if pairs >= 2 and ratio is not None and math.isfinite(ratio) and all(map(math.isfinite, interval or [])):
                cell.ratio, cell.ratio_interval = ratio, interval
        if cell.ratio is None:
            cell.text = f"{fmt.number(cell.value, kind)} ({fmt.MISSING})"
            return cell
    cell.text = fmt.value_with_ratio(cell.value, kind, cell.ratio, cell.ratio_interval, cell.unpaired)
    return cell


def paired_with(row, base_row, ours: Optional[list], base: Optional[list]) -> bool:
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


def _unpaired_ratio(value: float, base_value: float, ours: Optional[list], base: Optional[list]):
    """(ratio, interval) of two sides timed apart: the ratio of the values (each a median), and
    the interval that resamples each side on its own (None without two values a side)."""
    ratio = fmt.ratio_of(value, base_value)
    if ratio is None or not ours or not base:
        return ratio, None
    interval = bootstrap.ratio_of_medians_interval(bootstrap.value_clusters(ours), bootstrap.value_clusters(base))
    if interval is None or not all(map(math.isfinite, interval)):
        return ratio, None
    return ratio, interval

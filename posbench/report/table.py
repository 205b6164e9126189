"""Comparison tables built from stored rows: methods as rows, a grid parameter as columns.

The one table model: the end of a run and ``bench.py report`` build ``Table``s here and render
them with ``posbench.report.render``. Each cell keeps its number, its text and the row it came
from; failed cases show their status. Titles, units and formats come from the task's metric
declarations, the baseline and method order from ``run.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

import pandas as pd

from posbench.core.task import SEED_CI_SUFFIXES, SPREAD_SUFFIXES, Declarations, Metric, declare
from posbench.engine.env import was_busy
from posbench.report import bootstrap
from posbench.report import numbers as fmt
from posbench.report.names import slug  # noqa: F401  (tasks build their table keys with it)
from posbench.report.rows import Runs
from posbench.store.meta import LEGACY_BASELINE, RunMeta
from posbench.store.row import by_round, by_window, by_window_key, spread_in


@dataclass
class Cell:
    text: str
    value: Optional[float] = None  # what a chart plots; None when there is no number
    status: str = "ok"  # the case's (or evaluation's) status
    case_id: Optional[str] = None
    run_id: Optional[str] = None
    message: str = ""
    ratio: Optional[float] = None  # value / baseline value, same run and grid point
    ratio_interval: Optional[tuple[float, float]] = None  # a confidence interval of the ratio
    spread: Optional[tuple[float, float]] = None  # (low, high) the row holds: min-max of windows, or ± std of seeds
    unpaired: bool = False  # the ratio divides values timed apart from the baseline's (``paired_with``)


@dataclass
class Table:
    key: str  # file stem, unique within a report
    title: str
    caption: str
    task: str
    metric: str
    unit: str
    column_header: str
    columns: list
    rows: list[str]
    cells: dict = field(default_factory=dict)  # (row, column) -> Cell
    hardware: str = ""
    commit: str = ""
    fmt: str = "plain"  # posbench.report.numbers format of the values (charts' axis labels)
    extra: dict = field(default_factory=dict)  # a task's own chart data (its charts read it)
    row_header: str = "method"  # what the rows are (the run-details appendix: cases)
    baseline: Optional[str] = None  # the method the ratios divide by (None: no ratios)
    rest: dict = field(default_factory=dict)  # the other grid parameters the table's rows share
    higher_is_better: Optional[bool] = None  # the metric's direction (None: never compared)
    spread: str = ""  # what the cells' spreads are (SPREAD_MIN_MAX, SPREAD_STD): charts name it
    pooled: bool = False  # cells sum the counts of every run of a case: no run supersedes another
    note: str = ""  # one line under the table: the methods left out as unavailable here

    def cell(self, row: str, column) -> Cell:
        return self.cells.get((row, column), Cell(text="—", status="missing"))


# -- grouping ------------------------------------------------------------------------------


def ordered(values) -> list:
    """Unique values in first-seen order."""
    return list(dict.fromkeys(values))


def _sort_key(value):
    # Grid values are usually numbers; mixing types must not break sorting.
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def short_commit(commits) -> str:
    """The distinct commits of some rows, shortened, for a caption."""
    commits = ordered(c[:10] for c in commits if isinstance(c, str) and c)  # skips None/NaN
    return ", ".join(commits) if commits else "unknown commit"


def task_groups(frame: pd.DataFrame, task: str):
    """Rows of one task split per (suite, hardware): one set of tables per machine."""
    rows = frame[frame["task"] == task]
    for (suite, hardware), group in rows.groupby(["suite", "hardware"], sort=False, dropna=False):
        yield suite, hardware, group


def by_params(group: pd.DataFrame) -> dict[tuple, list]:
    """Rows (as named tuples) per grid point, e.g. one list per L_train, in stored order."""
    out: dict[tuple, list] = {}
    for row in group.itertuples(index=False):
        out.setdefault(tuple(sorted(row.params.items())), []).append(row)
    return out


def _rest(params: dict, column: str) -> tuple:
    """Grid parameters other than the column one; rows that differ in these get their own table."""
    return tuple(sorted((k, v) for k, v in params.items() if k != column))


def method_order(present, meta: Optional[RunMeta]) -> list[str]:
    """The suite's method order (run.json), then methods it does not list in the order read."""
    present = ordered(present)
    first = [m for m in (meta.methods if meta else []) if m in present]
    return first + [m for m in present if m not in first]


def baseline_for(meta: Optional[RunMeta], override: Optional[str]) -> Optional[str]:
    """An explicit ``--baseline`` wins; else the run.json's (None: no ratios); else the old default."""
    if override is not None:
        return override or None
    return meta.baseline if meta is not None else LEGACY_BASELINE


def declared_in(runs: Runs, task: str, frame: pd.DataFrame, names=()) -> Declarations:
    """The task's declarations of its own metrics, of ``names``, of the suites' and of those
    ``frame``'s rows hold, resolved in one call; a task this installation does not know declares none."""
    known = runs.tasks.get(task)
    found = [k for m in frame["metrics"] if isinstance(m, dict) for k in m]
    suites = [k for meta in runs.metas.values() if meta is not None for k in meta.metrics]
    return declare(known.METRICS if known is not None else {}, [*names, *suites, *found, "status"])


def choose_metrics(group: pd.DataFrame, declared: Declarations, meta: Optional[RunMeta]) -> list[str]:
    """The metrics a report tabulates: the suite's (run.json) and those declared ``table=True``,
    in declaration order, less those the task shows elsewhere (``shown_in``: a column of another
    table; housekeeping: the run-details appendix). With none of these, every numeric metric the
    rows carry that the task does not show elsewhere (all of them for an undeclared task)."""
    own = declared.metrics
    suite = list(meta.metrics if meta else [])
    wanted = set(suite) | {k for k, m in own.items() if m.table}
    names = [k for k in own if k in wanted] + [k for k in suite if k not in own]
    names = [k for k in names if _own_table(declared, k)]
    if names:
        return ordered(names)
    found = ordered(k for m in group["metrics"] for k, v in m.items() if _is_number(v))
    return [k for k in found if _own_table(declared, k) and declared.of[k].spread_of is None] if own else found


def _own_table(declared: Declarations, name: str) -> bool:
    said = declared.of[name]
    return not said.metric.shown_in and not (declared.metrics and said.housekeeping)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def family_head(name: str) -> Optional[str]:
    """``ppl@*`` -> ``ppl``: the head of a family key, None for a plain metric name."""
    return name[:-2] if name.endswith("@*") else None


# -- metric tables (anything with a numeric grid) -----------------------------------------


def metric_tables(
    runs: Runs,
    task: str,
    baseline: Optional[str] = None,
    column: str = "seq_len",
    metrics: Optional[list[str]] = None,
    frame: Optional[pd.DataFrame] = None,
    declared: Optional[Declarations] = None,
) -> list[Table]:
    """One table per metric, per (suite, hardware, other grid params): methods x ``column``.

    ``metrics`` None: ``choose_metrics``; ``frame``: a subset of ``runs.rows``; ``declared``: the
    caller's ``declared_in`` of them. A cell shows the value and its ratio to the baseline of the
    same run (else of the same machine), with rounds ``25.8k (0.99x ±0.01)``."""
    frame = runs.rows if frame is None else frame
    if declared is None:
        declared = declared_in(runs, task, frame[frame["task"] == task], metrics or ())
    tables = []
    for suite, hardware, group in task_groups(frame, task):
        meta = runs.meta_of(ordered(group["source"]))
        busy = any(was_busy(runs.envs.get(source, {})) for source in ordered(group["source"]))
        base_method = baseline_for(meta, baseline)
        params = ordered(k for p in group["params"] for k in p)
        col = column if column in params else (params[0] if params else "case")
        parts: dict[tuple, list] = {}
        for row in group.itertuples(index=False):
            parts.setdefault(_rest(row.params, col), []).append(row)
        names = metrics if metrics is not None else choose_metrics(group, declared, meta)
        for name in names:
            if family_head(name) is not None:
                tables += family_tables(suite, hardware, task, group, name, declared.of[name].metric, meta)
        plain = [n for n in names if family_head(n) is None]
        if names and not plain:
            continue
        for rest, rows in parts.items():
            for name in plain or ["status"]:  # no metric at all: still show the statuses
                table = _metric_table(
                    suite, hardware, task, rows, rest, name, declared.of[name].metric, col, base_method, group, meta, busy
                )
                asked = metrics is not None or name in (meta.metrics if meta else ())
                if asked or not declared.of[name].metric.optional or not _only_missing_numbers(table):
                    tables.append(table)
    return tables


def _only_missing_numbers(table: Table) -> bool:
    """Every case finished and none carries the metric: for an ``optional`` metric (a GPU-only
    figure on a CPU) a table of n/a would say nothing, so one nobody asked for is left out; a
    failed case's status is worth a table."""
    cells = table.cells.values()
    return bool(cells) and all(c.status == "ok" and c.value is None and c.text == "n/a" for c in cells)


def set_aside_unavailable(table: Table) -> Table:
    """``table`` without the rows whose every cell is ``unavailable`` (a CUDA-only method in a CPU
    run), named with their reason in one note under it (``note``, also ending the caption); their
    rows stay in cases.jsonl. A table of nothing else keeps them: an empty table would say less."""

    def statuses(row):
        return [table.cells[(row, c)].status for c in table.columns if (row, c) in table.cells]

    gone = [row for row in table.rows if statuses(row) and all(s == "unavailable" for s in statuses(row))]
    if not gone or len(gone) == len(table.rows):
        return table
    reasons: dict[str, list[str]] = {}
    for row in gone:
        said = [table.cells[(row, c)].message.strip() for c in table.columns if (row, c) in table.cells]
        reasons.setdefault(next((m for m in said if m), "no reason given"), []).append(row)
    table.rows = [r for r in table.rows if r not in gone]
    table.cells = {k: v for k, v in table.cells.items() if k[0] not in gone}
    table.note = (
        "Not run on this machine (unavailable): "
        + "; ".join(f"{', '.join(rows)} ({reason})" for reason, rows in reasons.items())
        + "."
    )
    table.caption = f"{table.caption} {table.note}".strip()
    return table


def family_tables(suite, hardware, task, group: pd.DataFrame, key: str, metric: Metric, meta: Optional[RunMeta]) -> list[Table]:
    """The tables of a family ``head@*`` declared ``table=True``, one per grid point: rows are methods
    (with the key's middle parts), columns its last part (``ppl@float32_bias@256`` of alibi is
    the cell (``alibi, float32_bias``, 256)); a failed case keeps a row showing its status."""
    head = family_head(key)
    tables = []
    for params, members in by_params(group).items():
        found = {
            r.case_id: {
                k: v
                for k, v in r.metrics.items()
                if k.startswith(head + "@") and _is_number(v) and not k.endswith(SPREAD_SUFFIXES + SEED_CI_SUFFIXES)
            }
            for r in members
        }  # a member's <m>_std (seeds) is its error bar, not a column
        if not any(found.values()):
            continue
        shown = [r for r in members if found[r.case_id] or r.status != "ok"]
        order = method_order((r.method for r in shown), meta)
        shown.sort(key=lambda r: order.index(r.method))
        rest_text = ", ".join(f"{k}={v}" for k, v in params)
        axis = metric.axis or "key"
        table = Table(
            key=slug(f"{suite}-{head}-{hardware}-{rest_text}"),
            title=f"{metric.title}{_unit_suffix(metric.unit)}, {suite}" + (f", {rest_text}" if rest_text else ""),
            caption="",
            task=task,
            metric=key,
            unit=metric.unit,
            column_header=axis,
            columns=[],
            rows=[],
            hardware=hardware,
            commit=short_commit(group["git_commit"]),
            fmt=metric.fmt,
            rest=dict(params),
            higher_is_better=metric.higher_is_better,
        )
        columns, failed = [], []
        for r in shown:
            if r.status != "ok":
                table.rows.append(r.method)
                failed.append(r)
                continue
            for name, value in found[r.case_id].items():
                *middle, column = name[len(head) + 1 :].split("@")
                column = int(column) if column.isascii() and column.isdigit() and len(column) < 16 else column
                label = ", ".join([r.method, *middle])
                table.rows = ordered(table.rows + [label])
                columns.append(column)
                spread = _spread(r.metrics, name, float(value), table)
                table.cells[(label, column)] = Cell(
                    text=fmt.number(value, metric.fmt),
                    value=float(value),
                    case_id=r.case_id,
                    run_id=r.run_id,
                    message=str(r.message or ""),
                    spread=spread,
                )
        columns = ordered(columns)  # words (dtypes) keep the order the rows hold them in; numbers sort
        table.columns = sorted(columns, key=_sort_key) if all(isinstance(c, int) for c in columns) else columns
        for r in failed:
            for column in table.columns:
                table.cells[(r.method, column)] = Cell(
                    text=fmt.status(r.status), status=r.status, case_id=r.case_id, run_id=r.run_id, message=str(r.message or "")
                )
        better = {True: " (higher is better)", False: " (lower is better)"}.get(metric.higher_is_better, "")
        table.caption = (
            f"{metric.title}{_unit_suffix(metric.unit)}{better} on {hardware} (commit {table.commit}); "
            f"rows are methods, columns {axis} ({metric.doc}). "
            "Failed cases show their status (OOM, unavailable, error, ...)."
        )
        tables.append(table)
    return tables


SPREAD_MIN_MAX = "min-max over measured windows"
SPREAD_STD = "± std over seeds"
SPREAD_SEED_CI = "95% t interval over seeds"  # posbench.report.stats.SEED_INTERVAL


def _spread(metrics: dict, name: str, value: Optional[float], table: Optional[Table]) -> Optional[tuple[float, float]]:
    """What the row says about the spread of ``name``: ``<name>_min``/``<name>_max`` (windows,
    rounds), else ``value ± <name>_std`` (seeds); None when it says nothing. Which one it was goes
    to ``table.spread`` (the table's charts name it under their error bars)."""
    lo, hi = (metrics.get(name + s) for s in SEED_CI_SUFFIXES) if isinstance(metrics, dict) else (None, None)
    if _is_number(lo) and _is_number(hi):  # several seeds: the interval of their mean
        if table is not None:
            table.spread = SPREAD_SEED_CI
        return float(lo), float(hi)
    spread = spread_in(metrics, name)
    if spread is None:
        return None
    if _is_number(spread.lo) and _is_number(spread.hi):
        if table is not None:
            table.spread = SPREAD_MIN_MAX
        return float(spread.lo), float(spread.hi)
    if _is_number(spread.std) and value is not None:
        if table is not None:
            table.spread = SPREAD_STD
        return value - float(spread.std), value + float(spread.std)
    return None


def details_tables(runs: Runs, task: str) -> list[Table]:
    """The task's housekeeping values (``is_housekeeping``: parameters, steps, threads, ...), one
    table per (suite, hardware) of finished cases, for the report's "Appendix: run details"."""
    declared = declared_in(runs, task, runs.rows[runs.rows["task"] == task])
    order = list(declared.metrics)
    tables = []
    for suite, hardware, group in task_groups(runs.rows, task):

        def housekeeping(r) -> list[str]:
            return [k for k, v in r.metrics.items() if _is_number(v) and declared.of[k].housekeeping]

        ok = [r for r in group.itertuples(index=False) if r.status == "ok" and housekeeping(r)]
        names = ordered(k for r in ok for k in housekeeping(r))
        names.sort(key=lambda k: order.index(k) if k in declared.metrics else len(order))
        if not names:
            continue
        table = Table(
            key=slug(f"{suite}-run-details-{hardware}"),
            title=f"Run details, {suite}",
            caption="",
            task=task,
            metric="details",
            unit="",
            column_header="metric",
            columns=names,
            rows=[],
            hardware=hardware,
            commit=short_commit(group["git_commit"]),
            row_header="case",
        )
        for r in ok:
            label = " ".join([r.method] + [f"{k}={v}" for k, v in r.params.items()])
            if label in table.rows:  # the same case in two runs (shards of different runs)
                label += f" ({r.run_id})"
            table.rows.append(label)
            for name in names:
                value = r.metrics.get(name)
                kind = declared.of[name].metric.fmt
                table.cells[(label, name)] = Cell(
                    text=fmt.number(value if _is_number(value) else None, kind),
                    value=float(value) if _is_number(value) else None,
                    case_id=r.case_id,
                    run_id=r.run_id,
                )
        legend = "; ".join(f"{k}: {declared.of[k].metric.title}{_unit_suffix(declared.of[k].metric.unit)}" for k in names)
        table.caption = (
            f"Housekeeping values of each finished case on {hardware} (commit {table.commit}), shown, never compared. {legend}."
        )
        tables.append(table)
    return tables


def _metric_table(
    suite, hardware, task, rows, rest, name, metric: Metric, column, base_method, group, meta, busy: bool = False
) -> Table:
    methods = method_order((r.method for r in rows), meta)
    columns = sorted(ordered(r.params.get(column, r.case_id) for r in rows), key=_sort_key)
    baselines = {}  # (run_id or None, column) -> (value, per-round values or None, the baseline's row)
    for r in rows:
        value = r.metrics.get(name)
        if r.method == base_method and r.status == "ok" and value is not None:
            col = r.params.get(column, r.case_id)
            entry = (value, _by_round(r, name), r)
            baselines.setdefault((r.run_id, col), entry)
            baselines.setdefault((None, col), entry)
    rest_text = ", ".join(f"{k}={v}" for k, v in rest)
    unit = _unit_suffix(metric.unit)
    table = Table(
        key=slug(f"{suite}-{name}-{hardware}-{rest_text}"),
        title=f"{metric.title}{unit}, {suite}" + (f", {rest_text}" if rest_text else ""),
        caption="",
        task=task,
        metric=name,
        unit=metric.unit,
        column_header=column,
        columns=columns,
        rows=methods,
        hardware=hardware,
        commit=short_commit(group["git_commit"]),
        fmt=metric.fmt,
        baseline=base_method,
        rest=dict(rest),
        higher_is_better=metric.higher_is_better,
    )
    for r in rows:
        col = r.params.get(column, r.case_id)
        table.cells[(r.method, col)] = _metric_cell(r, name, metric.fmt, baselines, col, r.method == base_method, table)
    paired = any(c.ratio_interval is not None and not c.unpaired for c in table.cells.values())
    windowed = any(by_window_key(name) in (r.series if isinstance(r.series, dict) else {}) for r in rows)
    if not base_method:
        ratios = "No ratios: the suite names no baseline. "
    elif paired and windowed:
        ratios = (
            f"In brackets: ratio to {base_method} in the same run, the median of per-window ratios (paired "
            "windows: a grid point's methods alternated short measured windows in one process per round), "
            "± half the width of its bootstrap 95% interval (rounds, then windows resampled). "
        )
    elif paired:
        ratios = (
            f"In brackets: ratio to {base_method} in the same run, the median of per-round ratios "
            "(interleaved rounds), ± half the width of its bootstrap 95% interval. "
        )
    elif baselines:
        ratios = f"In brackets: ratio to {base_method} in the same run. "
    elif base_method in methods:
        ratios = f"No ratios: baseline {base_method} has no finished case. "
    else:
        ratios = f"No ratios: baseline {base_method} was not run. "
    if any(c.unpaired for c in table.cells.values()):
        ratios += UNPAIRED_NOTE.format(base=base_method) + " "
    better = {True: " (higher is better)", False: " (lower is better)"}.get(metric.higher_is_better, "")
    table.caption = (
        f"{metric.title}{unit}{better} on {hardware} (commit {table.commit}); rows are methods, "
        f"columns {column}. " + ratios + "Failed cases show their status (OOM, unavailable, error, ...)."
    )
    table.caption += compile_note(rows)
    if busy:
        table.caption += (
            ' Measured on a busy machine (other processes competed for it; env.json "machine" '
            "says which): speeds are noisier than usual."
        )
    return table


def compile_note(rows) -> str:
    """How the rows ran, for a task with a ``compile`` setting (torch.compile); "" for the others."""
    said = {bool(r.settings["compile"]) for r in rows if isinstance(r.settings, dict) and "compile" in r.settings}
    if said == {True}:
        return " Compiled with torch.compile (compile time measured apart, excluded from the numbers)."
    if said == {False}:
        return " Eager PyTorch (compile: false)."
    return " Mixed: some rows compiled with torch.compile, some eager (their settings' compile)." if said else ""


def _unit_suffix(unit: str) -> str:
    # Memory is shown in GiB everywhere (posbench.report.numbers.nbytes), so a title says GiB, not bytes.
    if unit == "bytes":
        return " (GiB)"
    return "" if unit in ("", "-") else f" ({unit})"


def _metric_cell(r, name, kind, baselines, col, is_baseline: bool = False, table: Optional[Table] = None) -> Cell:
    cell = Cell(text="", status=r.status, case_id=r.case_id, run_id=r.run_id, message=str(r.message or ""))
    if r.status != "ok":
        cell.text = fmt.status(r.status)
        return cell
    value = r.metrics.get(name)
    if value is None:
        cell.text = fmt.MISSING
        return cell
    cell.value = float(value)
    cell.spread = _spread(r.metrics, name, cell.value, table)
    base = baselines.get((r.run_id, col))
    elsewhere = base is None  # the baseline's row comes from another run folder
    base = base or baselines.get((None, col))
    if base:
        ours = _by_round(r, name)
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


UNPAIRED_NOTE = (
    "Marked unpaired: timed apart from {base} (another process, pass or run folder: a method that "
    "joined a finished run with --unpaired, or rows of several runs), so the ratio divides the two "
    "medians, its interval resamples each side on its own, and it claims no pairing."
)


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


def _by_round(r, name: str) -> Optional[list]:
    """The row's per-round values of ``name`` (``series[name + "_by_round"]``), if it has rounds;
    with paired windows each round's windows (``series[name + "_by_window"]``, any number of rounds)."""
    windows = by_window(r.series, name)
    if isinstance(windows, list) and windows:
        return windows
    values = by_round(r.series, name)
    return values if isinstance(values, list) and len(values) >= 2 else None


def run_tables(runs: Runs, case_ids: Optional[set] = None) -> list[Table]:
    """The tables printed at the end of a run: the suite's ``metrics`` (run.json) for its task,
    methods x the first grid axis (``seq_len`` when there is one); a metric declared ``shown_in``
    another prints that one (a family: ``posbench.report.table.family_tables``). A task that
    declares ``summary_tables`` prints its own instead (``posbench.core.task.Task``). A method
    unavailable on this machine is one note under each table (``set_aside_unavailable``); the
    report keeps its row and its legend entry."""
    frame = runs.rows if case_ids is None else runs.rows[runs.rows["case_id"].isin(case_ids)]
    out = []
    for source in ordered(frame["source"]):
        meta = runs.metas.get(source)
        if meta is None or not meta.metrics:
            continue
        column = "seq_len" if "seq_len" in meta.grid else next(iter(meta.grid), "case")
        part = frame[frame["source"] == source]
        task = runs.tasks.get(meta.task)
        if task is not None and task.summary_tables is not None:  # a layout of the task's own
            out += task.summary_tables(Runs(rows=part, envs=runs.envs, metas=runs.metas, tasks=runs.tasks))
            continue
        declared = declared_in(runs, meta.task, part, meta.metrics)
        # a metric the task shows inside another table (a per-dtype count of a family) prints that table
        names = ordered(declared.of[m].metric.shown_in or m for m in meta.metrics)
        out += metric_tables(runs, meta.task, None, column, names, frame=part, declared=declared)
    return [set_aside_unavailable(t) for t in out]

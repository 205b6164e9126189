"""Comparison tables built from stored rows: methods as rows, a grid parameter as columns.

The end of a run (``run_tables``) and ``bench.py report`` (``metric_tables``, ``details_tables``)
build their ``Table``s here from a task's rows; titles, units and formats come from the task's
metric declarations (one ``TableSpec`` per metric), the baseline and method order from
``run.json``. Each cell is a ``posbench.report.cells.metric_cell``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from posbench.core.task import SEED_CI_SUFFIXES, SPREAD_SUFFIXES, Declarations, Metric
from posbench.engine.env import was_busy
from posbench.report import numbers as fmt
from posbench.report import resolution
from posbench.report.cells import PAIRED_VALUE_NOTE, UNPAIRED_NOTE, Baselines, metric_cell, spread_of
from posbench.report.grouping import (
    baseline_for,
    by_params,
    choose_metrics,
    declared_in,
    family_head,
    is_number,
    method_order,
    ordered,
    rest_of,
    short_commit,
    sort_key,
    task_groups,
)
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.report.table import Cell, Table, TableSpec
from posbench.report.table_corpus import name_corpus
from posbench.store.meta import RunMeta
from posbench.store.row import by_window_key


@dataclass(frozen=True, eq=False)
class SuiteRows:
    """One (suite, hardware) group of a task's rows (``task_groups``) and what all its tables share."""

    task: str
    suite: str
    hardware: str
    rows: pd.DataFrame
    meta: RunMeta | None  # the run.json of its runs (``Runs.meta_of``)
    baseline: str | None = None  # the method the ratios divide by (None: no ratios)
    busy: bool = False  # a run of it shared the machine with other processes (env.json "machine")

    @property
    def commit(self) -> str:
        return short_commit(self.rows["git_commit"])


def metric_spec(task: str, name: str, metric: Metric, column_header: str) -> TableSpec:
    """The table of a declared metric: its unit, format and direction, columns ``column_header``."""
    return TableSpec(
        task=task,
        metric=name,
        unit=metric.unit,
        fmt=metric.fmt,
        column_header=column_header,
        higher_is_better=metric.higher_is_better,
    )


@dataclass(frozen=True)
class Layout:
    """How a task's metric tables are laid out: what is declared of its metrics, against which
    baseline, along which grid parameter."""

    task: str
    declared: Declarations  # ``declared_in`` of the task's rows and of the metrics asked for
    baseline: str | None = None  # an explicit ``--baseline`` ("": none); None: run.json's
    column: str = "seq_len"  # the grid parameter of the columns (its first one when absent)


def metric_tables(
    runs: Runs, task: str, baseline: str | None = None, column: str = "seq_len", metrics: list[str] | None = None
) -> list[Table]:
    """One table per metric, per (suite, hardware, other grid params): methods x ``column``.

    ``metrics`` None: ``choose_metrics`` per group. A cell shows the value and its ratio to the
    baseline of the same run (else of the same machine), with rounds ``25.8k (0.99x ±0.01)`` (an
    asymmetric interval as its bounds, ``25.8k (0.84x [0.71, 1.41])``)."""
    layout = Layout(task, declared_in(runs, task, runs.rows[runs.rows["task"] == task], metrics or ()), baseline, column)
    tables = []
    for where in suite_groups(runs, layout):
        names = metrics if metrics is not None else choose_metrics(where.rows, layout.declared, where.meta)
        tables += laid_out(where, layout, names, asked=metrics is not None)
    return tables


def suite_groups(runs: Runs, layout: Layout) -> list[SuiteRows]:
    """``runs``' rows of ``layout.task`` per (suite, hardware), each with its run.json and baseline."""
    groups = []
    for suite, hardware, group in task_groups(runs.rows, layout.task):
        sources = ordered(group["source"])
        meta = runs.meta_of(sources)
        busy = any(was_busy(runs.envs.get(source, {})) for source in sources)
        groups.append(SuiteRows(layout.task, suite, hardware, group, meta, baseline_for(meta, layout.baseline), busy))
    return groups


def laid_out(where: SuiteRows, layout: Layout, names: list[str], asked: bool) -> list[Table]:
    """The tables of metrics ``names`` for one group (``suite_groups``); ``asked`` False: an optional
    metric nobody asked for (not in run.json's) is left out where no case carries it."""
    declared = layout.declared
    params = ordered(k for p in where.rows["params"] for k in p)
    col = layout.column if layout.column in params else (params[0] if params else "case")
    tables, plain = [], []
    for name in names:
        if family_head(name) is None:
            plain.append(name)
        else:
            tables += family_tables(where, name, declared.of[name].metric)
    if names and not plain:
        return tables
    # one spec per metric (no metric: the statuses' table), one table per value of the other params
    specs = [metric_spec(where.task, name, declared.of[name].metric, col) for name in plain or ["status"]]
    parts: dict[tuple, list] = {}
    for row in where.rows.itertuples(index=False):
        parts.setdefault(rest_of(row.params, col), []).append(row)
    for rest, rows in parts.items():
        for spec in specs:
            metric = declared.of[spec.metric].metric
            table = _metric_table(where, spec, metric, rest, rows)
            wanted = asked or spec.metric in (where.meta.metrics if where.meta else ())
            if wanted or not metric.optional or not _only_missing_numbers(table):
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


def family_tables(where: SuiteRows, key: str, metric: Metric) -> list[Table]:
    """The tables of a family ``head@*`` declared ``table=True``, one per grid point: rows are methods
    (with the key's middle parts), columns its last part (``ppl@float32_bias@256`` of alibi is
    the cell (``alibi, float32_bias``, 256)); a failed case keeps a row showing its status."""
    head = family_head(key)
    axis = metric.axis or "key"
    spec = metric_spec(where.task, key, metric, axis)
    tables = []
    for params, members in by_params(where.rows).items():
        found = {
            r.case_id: {
                k: v
                for k, v in r.metrics.items()
                if k.startswith(head + "@") and is_number(v) and not k.endswith(SPREAD_SUFFIXES + SEED_CI_SUFFIXES)
            }
            for r in members
        }  # a member's <m>_std (seeds) is its error bar, not a column
        if not any(found.values()):
            continue
        shown = [r for r in members if found[r.case_id] or r.status != "ok"]
        order = method_order((r.method for r in shown), where.meta)
        shown.sort(key=lambda r: order.index(r.method))
        rest_text = ", ".join(f"{k}={v}" for k, v in params)
        table = Table(
            spec,
            key=slug(f"{where.suite}-{head}-{where.hardware}-{rest_text}"),
            title=f"{metric.title}{unit_suffix(metric.unit)}, {where.suite}" + (f", {rest_text}" if rest_text else ""),
            hardware=where.hardware,
            commit=where.commit,
            rest=dict(params),
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
                spread = spread_of(r.metrics, name, float(value), table)
                table.cells[(label, column)] = Cell(
                    text=fmt.number(value, metric.fmt),
                    value=float(value),
                    case_id=r.case_id,
                    run_id=r.run_id,
                    message=str(r.message or ""),
                    spread=spread,
                )
        columns = ordered(columns)  # words (dtypes) keep the order the rows hold them in; numbers sort
        table.columns = sorted(columns, key=sort_key) if all(isinstance(c, int) for c in columns) else columns
        for r in failed:
            for column in table.columns:
                table.cells[(r.method, column)] = Cell(
                    text=fmt.status(r.status), status=r.status, case_id=r.case_id, run_id=r.run_id, message=str(r.message or "")
                )
        better = {True: " (higher is better)", False: " (lower is better)"}.get(metric.higher_is_better, "")
        table.caption = (
            f"{metric.title}{unit_suffix(metric.unit)}{better} on {where.hardware} (commit {table.commit}); "
            f"rows are methods, columns {axis} ({metric.doc}). "
            "Failed cases show their status (OOM, unavailable, error, ...)."
        )
        tables.append(table)
    return tables


def details_tables(runs: Runs, task: str) -> list[Table]:
    """The task's housekeeping values (``is_housekeeping``: parameters, steps, threads, ...), one
    table per (suite, hardware) of finished cases, for the report's "Appendix: run details"."""
    declared = declared_in(runs, task, runs.rows[runs.rows["task"] == task])
    order = list(declared.metrics)
    spec = TableSpec(task=task, metric="details", column_header="metric", row_header="case")
    tables = []
    for suite, hardware, group in task_groups(runs.rows, task):

        def housekeeping(r) -> list[str]:
            return [k for k, v in r.metrics.items() if is_number(v) and declared.of[k].housekeeping]

        ok = [r for r in group.itertuples(index=False) if r.status == "ok" and housekeeping(r)]
        names = ordered(k for r in ok for k in housekeeping(r))
        names.sort(key=lambda k: order.index(k) if k in declared.metrics else len(order))
        if not names:
            continue
        table = Table(
            spec,
            key=slug(f"{suite}-run-details-{hardware}"),
            title=f"Run details, {suite}",
            columns=names,
            hardware=hardware,
            commit=short_commit(group["git_commit"]),
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
                    text=fmt.number(value if is_number(value) else None, kind),
                    value=float(value) if is_number(value) else None,
                    case_id=r.case_id,
                    run_id=r.run_id,
                )
        legend = "; ".join(f"{k}: {declared.of[k].metric.title}{unit_suffix(declared.of[k].metric.unit)}" for k in names)
        table.caption = (
            f"Housekeeping values of each finished case on {hardware} (commit {table.commit}), shown, never compared. {legend}."
        )
        tables.append(table)
    return tables


def _metric_table(where: SuiteRows, spec: TableSpec, metric: Metric, rest: tuple, rows: list) -> Table:
    """The table of ``spec`` for ``rows`` (one grid point of ``rest``): methods x its column, each
    cell with its ratio to ``where.baseline``, the caption saying how the ratios were formed."""
    base_method, name, column = where.baseline, spec.metric, spec.column_header
    methods = method_order((r.method for r in rows), where.meta)
    columns = sorted(ordered(r.params.get(column, r.case_id) for r in rows), key=sort_key)
    baselines = Baselines(rows, name, base_method, column)
    rest_text = ", ".join(f"{k}={v}" for k, v in rest)
    unit = unit_suffix(metric.unit)
    table = Table(
        spec,
        key=slug(f"{where.suite}-{name}-{where.hardware}-{rest_text}"),
        title=f"{metric.title}{unit}, {where.suite}" + (f", {rest_text}" if rest_text else ""),
        columns=columns,
        rows=methods,
        hardware=where.hardware,
        commit=where.commit,
        baseline=base_method,
        rest=dict(rest),
    )
    for r in rows:
        col = r.params.get(column, r.case_id)
        table.cells[(r.method, col)] = metric_cell(r, table, baselines.at(r.run_id, col))
    paired = any(c.ratio_interval is not None and not c.unpaired for c in table.cells.values())
    windowed = any(by_window_key(name) in (r.series if isinstance(r.series, dict) else {}) for r in rows)
    if not base_method:
        ratios = "No ratios: the suite names no baseline. "
    elif paired and windowed:
        ratios = (
            f"In brackets: ratio to {base_method} in the same run, the median of per-window ratios (paired "
            "windows: a grid point's methods alternated short measured windows in one process per round), "
            f"then its bootstrap 95% interval (rounds, then windows resampled){INTERVAL_FORM} "
        )
    elif paired:
        ratios = (
            f"In brackets: ratio to {base_method} in the same run, the median of per-round ratios "
            f"(interleaved rounds), then its bootstrap 95% interval{INTERVAL_FORM} "
        )
    elif baselines.found:
        ratios = f"In brackets: ratio to {base_method} in the same run. "
    elif base_method in methods:
        ratios = f"No ratios: baseline {base_method} has no finished case. "
    else:
        ratios = f"No ratios: baseline {base_method} was not run. "
    if any(c.unpaired for c in table.cells.values()):
        ratios += UNPAIRED_NOTE.format(base=base_method) + " "
    if any(c.median is not None and c.value != c.median for c in table.cells.values()):
        ratios += PAIRED_VALUE_NOTE.format(base=base_method) + " "
    if metric.unit == "bytes":
        table.resolution = resolution.described(_device(rows))
        ratios += (
            f"Memory is one measurement per process: a difference under {table.resolution} is within its "
            "resolution (a re-run of the same code moves it that much) and is not claimed. "
        )
    better = {True: " (higher is better)", False: " (lower is better)"}.get(metric.higher_is_better, "")
    table.caption = (
        f"{metric.title}{unit}{better} on {where.hardware} (commit {table.commit}); rows are methods, "
        f"columns {column}. " + ratios + "Failed cases show their status (OOM, unavailable, error, ...)."
    )
    table.caption += compile_note(rows)
    if where.busy and metric.unit in TIMED_UNITS:
        table.caption += (
            ' Measured on a busy machine (other processes competed for it; env.json "machine" '
            "says which): speeds are noisier than usual."
        )
    return table


# Units of a quantity read off a clock: a busy machine makes them noisy (memory and perplexity it does not).
TIMED_UNITS = {"words/s", "tokens/s", "ms", "s", "TFLOP/s", "J", "J/token"}
# How a ratio's interval is printed, for the captions that show one (posbench.report.numbers.interval_text).
INTERVAL_FORM = ": ±h, its half-width, where it is symmetric to the two decimals printed, else [low, high]."


def _device(rows) -> str | None:
    """The device type the rows were measured on (the first one named; a table holds one machine's)."""
    return next((str(r.device) for r in rows if isinstance(getattr(r, "device", None), str)), None)


def compile_note(rows) -> str:
    """How the rows ran, for a task with a ``compile`` setting (torch.compile); "" for the others."""
    said = {bool(r.settings["compile"]) for r in rows if isinstance(r.settings, dict) and "compile" in r.settings}
    if said == {True}:
        return " Compiled with torch.compile (compile time measured apart, excluded from the numbers)."
    if said == {False}:
        return " Eager PyTorch (compile: false)."
    return " Mixed: some rows compiled with torch.compile, some eager (their settings' compile)." if said else ""


def unit_suffix(unit: str) -> str:
    """`` (unit)`` for a title; memory is shown in GiB everywhere (``posbench.report.numbers.nbytes``),
    so a title says GiB, not bytes; nothing for a unitless metric."""
    if unit == "bytes":
        return " (GiB)"
    return "" if unit in ("", "-") else f" ({unit})"


def run_tables(runs: Runs, case_ids: set | None = None) -> list[Table]:
    """The tables printed at the end of a run: the suite's ``metrics`` (run.json) for its task,
    methods x the first grid axis (``seq_len`` when there is one); a metric declared ``shown_in``
    another prints that one (a family: ``family_tables``). A task that declares
    ``summary_tables`` prints its own instead (``posbench.core.task.Task``). A method
    unavailable on this machine is one note under each table (``set_aside_unavailable``); the
    report keeps its row and its legend entry."""
    frame = runs.rows if case_ids is None else runs.rows[runs.rows["case_id"].isin(case_ids)]
    out = []
    for source in ordered(frame["source"]):
        meta = runs.metas.get(source)
        if meta is None or not meta.metrics:
            continue
        part = runs.with_rows(frame[frame["source"] == source])
        task = runs.tasks.get(meta.task)
        if task is not None and task.summary_tables is not None:  # a layout of the task's own
            out += task.summary_tables(part)
            continue
        declared = declared_in(part, meta.task, part.rows, meta.metrics)
        # a metric the task shows inside another table (a per-dtype count of a family) prints that table
        names = ordered(declared.of[m].metric.shown_in or m for m in meta.metrics)
        column = "seq_len" if "seq_len" in meta.grid else next(iter(meta.grid), "case")
        layout = Layout(meta.task, declared, None, column)
        for where in suite_groups(part, layout):
            out += laid_out(where, layout, names, asked=True)
    name_corpus(out, frame)
    return [set_aside_unavailable(t) for t in out]

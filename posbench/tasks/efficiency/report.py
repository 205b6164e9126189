"""The efficiency task's report: its metric tables, methods x seq_len, first in the report, each
cell with a method's ratio to ``nope`` (no position work at all, the floor) beside its ratio to the
suite's baseline, so a reader sees what a method costs over the model itself.

The floor's ratios are formed exactly as the baseline's (``posbench.report.tabulate.metric_tables`` with
``nope`` as the baseline: paired windows or rounds, a bootstrap interval) and added to each cell in
square brackets: ``25.8k (0.99x ±0.01) [1.02x ±0.01]``. docs/tasks/efficiency.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posbench.report import numbers as fmt

if TYPE_CHECKING:
    from posbench.report.table import Table

# posbench.report.tabulate (pandas) and .sections (matplotlib) are imported inside the functions: the
# task's declaration imports this module, and `bench.py validate` must not wait for them.

REPORT_ORDER = 10  # the first section
REPORT_COLUMN = "seq_len"
TASK_NAME = "efficiency"  # the rows' task (task.py registers the task under this name)
FLOOR = "nope"


# Tables shown after the whole-process peak they refine, where the rows carry them (runs made
# before posbench measured them keep the tables they always had).
ABOVE_BASE = {
    "peak_mem_train_bytes": "peak_mem_train_above_base_bytes",
    "peak_mem_eval_bytes": "peak_mem_eval_above_base_bytes",
}


def floor_tables(
    runs, baseline: str | None = None, column: str = REPORT_COLUMN, metrics: list[str] | None = None, floor: str = FLOOR
) -> list[Table]:
    """``metric_tables`` of the efficiency rows in ``runs`` with the ratio to ``floor`` in every cell
    (``add_floor``); each whole-process peak memory table followed by its peak above the resting
    footprint (``ABOVE_BASE``) where the rows carry it."""
    from posbench.report.tabulate import metric_tables

    tables = metric_tables(runs, TASK_NAME, baseline, column, metrics)
    carried = {k for m in runs.rows["metrics"] if isinstance(m, dict) for k in m}
    above = list(dict.fromkeys(ABOVE_BASE[t.metric] for t in tables if ABOVE_BASE.get(t.metric) in carried))
    refined = metric_tables(runs, TASK_NAME, baseline, column, above) if above else []

    def after(table: Table) -> list[Table]:
        wanted = ABOVE_BASE.get(table.metric)
        return [x for x in refined if x.metric == wanted and (x.hardware, x.rest) == (table.hardware, table.rest)]

    tables = [x for t in tables for x in (t, *after(t), *(mfu_tables(runs, column, t) if t.metric == "train_wps" else []))]
    floors = {t.key: t for t in metric_tables(runs, TASK_NAME, floor, column, metrics)}
    floors.update({t.key: t for t in (metric_tables(runs, TASK_NAME, floor, column, above) if above else [])})
    for table in tables:
        add_floor(table, floors.get(table.key), floor)
    return tables


MFU, PER_TOKEN = "train_mfu", "train_flops_per_token"
UNKNOWN_PEAK = "unknown peak"


def mfu_tables(runs, column: str = REPORT_COLUMN, speed: Table | None = None) -> list[Table]:
    """Model FLOPs utilisation in training, methods x ``column``, no ratios: ``41.3% (5.2M
    FLOP/token)``, or where the device's dense peak is unknown (every CPU) ``unknown peak (5.2M
    FLOP/token)``, never a zero. None for rows made before posbench counted FLOPs per token. A
    table where no device's peak is known (a CPU run) would be a column of ``unknown peak``: it is
    left out, and one sentence under ``speed`` (the training speed table it follows) says why."""
    from posbench.report.grouping import ordered
    from posbench.report.tabulate import metric_tables

    carried = {(r.run_id, r.case_id): r for r in runs.rows.itertuples(index=False) if isinstance(r.metrics, dict)}
    if not any(PER_TOKEN in r.metrics for r in carried.values()):
        return []
    tables = metric_tables(runs, TASK_NAME, "", column, [MFU])
    if speed is not None:  # the MFU table that follows this training speed table, where a peak is known
        mine = [t for t in tables if (t.hardware, t.rest) == (speed.hardware, speed.rest)]
        tables = [t for t in mine if any(c.value is not None for c in t.cells.values())]
        if mine and not tables:
            speed.caption += (
                " No MFU table: the device's dense peak is unknown (every CPU; posbench/engine/peaks.py), so no "
                "share of it is claimed (training FLOPs per token: the report's run details)."
            )
    for table in tables:
        peaks = []
        for cell in table.cells.values():
            row = carried.get((cell.run_id, cell.case_id))
            if cell.status != "ok" or row is None or row.metrics.get(PER_TOKEN) is None:
                continue
            said = f"{fmt.count(row.metrics[PER_TOKEN])} FLOP/token"
            cell.text = f"{cell.value:.1%} ({said})" if cell.value is not None else f"{UNKNOWN_PEAK} ({said})"
            info = row.info if isinstance(row.info, dict) else {}
            peaks.append(str(info.get("mfu_peak") or UNKNOWN_PEAK))
        table.caption = (
            f"Model FLOPs utilisation in training on {table.hardware} (commit {table.commit}); rows are methods, "
            f"columns {table.column_header}: training words/s per device x FLOPs per token (posbench/engine/flops.py: "
            "the matmuls and the method's own work, forward and backward) / the device's dense peak at the run's "
            f"dtype (posbench/engine/peaks.py). '{UNKNOWN_PEAK}': the device has no known peak (every CPU), so no "
            f"share is claimed; the FLOPs per token stand. Peaks: {'; '.join(ordered(peaks)) or UNKNOWN_PEAK}."
        )
    return tables


def add_floor(table: Table, against: Table | None, floor: str = FLOOR) -> None:
    """Append to each cell of ``table`` its ratio in ``against`` (the same table with ``floor`` as the
    baseline), in square brackets; ``table.extra["floor"]`` and ``["floor_ratios"]`` keep them
    ({"row@column": [ratio, low, high]}). A table whose baseline is the floor, or whose run did not
    run the floor, stays as it is (the report of a run made before the floor reads the same); one
    whose floor has no finished case says so in its caption. ``extra["floor"]`` names the floor
    wherever it is a row (the summary never ranks it)."""
    if floor not in table.rows:
        return  # a run without the floor: the table it always had
    table.extra["floor"] = floor  # the summary names it as the floor, never as the best
    if table.baseline in (floor, None):
        return  # its ratios already are the floor's, or it has none (MFU)
    ratios = {} if against is None else {key: c for key, c in against.cells.items() if c.ratio is not None}
    if not ratios:
        table.caption += f" No floor: {floor} has no finished case."
        return
    kept = {}
    for key, cell in table.cells.items():
        found = ratios.get(key)
        if found is None or cell.value is None or key[0] == floor:
            continue
        cell.text += f" [{fmt.ratio_text(found.ratio, found.ratio_interval, found.unpaired)}]"
        low, high = found.ratio_interval if found.ratio_interval is not None else (None, None)
        kept[f"{key[0]}@{key[1]}"] = [found.ratio, low, high]
    table.extra["floor"], table.extra["floor_ratios"] = floor, kept
    table.caption += (
        f" In square brackets: ratio to {floor}, the floor (the same model with no position work), "
        "formed as the ratio to the baseline."
    )


def summary_tables(runs) -> list[Table]:
    """The tables printed after a run: the suite's metrics (run.json), with the floor; where they
    include the training peak, the peak evaluation memory beside it wherever the rows measured it
    (the stock suite lists only the training peak)."""
    from posbench.report.grouping import ordered

    sources = ordered(runs.rows["source"])
    metas = [runs.metas.get(s) for s in sources]
    names = ordered(m for meta in metas if meta is not None for m in meta.metrics)
    carried = {k for m in runs.rows["metrics"] if isinstance(m, dict) for k, v in m.items() if v is not None}
    if TRAIN_MEMORY in names and EVAL_MEMORY in carried:  # measured: printed beside the training peak
        names = ordered([*names, EVAL_MEMORY])
    return floor_tables(runs, None, REPORT_COLUMN, names or None)


TRAIN_MEMORY, EVAL_MEMORY = "peak_mem_train_bytes", "peak_mem_eval_bytes"


def report_sections(runs, baseline: str | None = None) -> list:
    """The report's efficiency section: the default layout (``metric_section``), with the floor."""
    from posbench.report.sections import Section, metric_blocks

    task = runs.tasks.get(TASK_NAME)
    return [Section(task.title, TASK_NAME, metric_blocks(runs, floor_tables(runs, baseline, task.REPORT_COLUMN)))]

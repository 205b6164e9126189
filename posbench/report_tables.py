"""Collating stored rows into comparison tables (methods as rows, a grid parameter as columns).

A ``Table`` keeps, for every cell, the number a chart plots, the text a reader sees and the
``case_id``/``run_id`` it came from, so renderers and charts draw from the same data and the HTML
report can link each number to its row. Cells of failed cases show their status (``OOM``,
``unavailable``, ...) instead of disappearing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

DEFAULT_BASELINE = "sinusoidal"


@dataclass
class Cell:
    text: str
    value: float | None = None      # what a chart plots; None when there is no number
    status: str = "ok"              # the case's (or evaluation's) status
    case_id: str | None = None
    run_id: str | None = None
    message: str = ""
    ratio: float | None = None      # value / baseline value, same run and grid point


@dataclass
class Table:
    key: str                        # file stem, unique within a report
    title: str
    caption: str
    task: str
    metric: str
    unit: str
    column_header: str
    columns: list
    rows: list[str]
    cells: dict = field(default_factory=dict)      # (row, column) -> Cell
    hardware: str = ""
    commit: str = ""
    extra: dict = field(default_factory=dict)      # e.g. L_train, best_ppl, for charts

    def cell(self, row: str, column) -> Cell:
        return self.cells.get((row, column), Cell(text="—", status="missing"))


# -- number formatting ---------------------------------------------------------------------

def fmt_count(value: float) -> str:
    """Words/s and the like: 25.8k, 1.23M."""
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")):
        if abs(value) >= limit:
            return _three_digits(value / limit) + suffix
    return f"{value:.3g}"


def _three_digits(x: float) -> str:
    # Three significant digits but keeping trailing zeros (26.0k, not 26k), so columns line up.
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.1f}" if abs(x) >= 10 else f"{x:.2f}"


def fmt_bytes(value: float) -> str:
    """Memory in binary units, the way allocators report it."""
    for limit, suffix in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if abs(value) >= limit:
            return f"{_three_digits(value / limit)} {suffix}"
    return f"{value:.0f} B"


def fmt_plain(value: float) -> str:
    return f"{value:.4g}"


def fmt_ppl(value: float) -> str:
    return f"{value:.2f}"


def status_text(status: str) -> str:
    return "OOM" if status == "oom" else status


# (metric, title, unit, formatter, column parameter) for the tasks with a fixed layout.
EFFICIENCY_METRICS = [
    ("train_wps", "Training speed", "words/s", fmt_count),
    ("eval_wps", "Evaluation speed", "words/s", fmt_count),
    ("peak_mem_train_bytes", "Peak training memory", "bytes", fmt_bytes),
    ("peak_mem_eval_bytes", "Peak evaluation memory", "bytes", fmt_bytes),
]
KERNEL_METRICS = [
    ("fwdbwd_ms", "Kernel forward+backward time", "ms", fmt_plain),
    ("fwd_ms", "Kernel forward time", "ms", fmt_plain),
    ("bwd_ms", "Kernel backward time", "ms", fmt_plain),
    ("fwdbwd_tflops", "Kernel forward+backward throughput", "TFLOP/s", fmt_plain),
    ("peak_mem_bytes", "Kernel peak memory", "bytes", fmt_bytes),
]

DECODE_METRICS = [
    ("tpot_ms", "Time per output token (median)", "ms", fmt_plain),
    ("tpot_p90_ms", "Time per output token (p90)", "ms", fmt_plain),
    ("ttft_ms", "Time to first token (prefill)", "ms", fmt_plain),
    ("decode_wps", "Decode speed", "tokens/s", fmt_count),
    ("kv_cache_bytes", "KV-cache size", "bytes", fmt_bytes),
    ("peak_mem_decode_bytes", "Peak decode memory", "bytes", fmt_bytes),
]


# -- grouping ------------------------------------------------------------------------------

def slug(text: str) -> str:
    out = "".join(ch if ch.isalnum() else "-" for ch in str(text).lower())
    while "--" in out:
        out = out.replace("--", "-")
    return out.strip("-")


def ordered(values) -> list:
    """Unique values in first-seen order (the suite's order of methods)."""
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _sort_key(value):
    # Grid values are usually numbers; mixing types must not break sorting.
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def short_commit(commits) -> str:
    """The distinct commits of some rows, shortened, for a caption."""
    commits = ordered(c[:10] for c in commits if isinstance(c, str) and c)  # skips None/NaN
    return ", ".join(commits) if commits else "unknown commit"


def baseline_of(frame: pd.DataFrame) -> str:
    """The suite's baseline method: stored in the rows' settings, sinusoidal if absent."""
    for settings in frame["settings"]:
        if isinstance(settings, dict) and settings.get("baseline"):
            return str(settings["baseline"])
    return DEFAULT_BASELINE


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


# -- metric tables (efficiency, kernels, anything with a numeric grid) ---------------------

def metric_tables(frame: pd.DataFrame, task: str, metrics, column: str,
                  baseline: str | None = None) -> list[Table]:
    """One table per metric, per (suite, hardware, other grid params): methods x ``column``.

    Cells show the value and, when the baseline method has an ok row at the same grid point,
    the ratio to it, e.g. ``25.8k (0.99x)``. The baseline is looked up in the same run first
    (a ratio is only fair within one run), then on the same machine (shards of one run).
    """
    tables = []
    for suite, hardware, group in task_groups(frame, task):
        base_method = baseline_of(group) if baseline is None else baseline
        parts: dict[tuple, list] = {}
        for row in group.itertuples(index=False):
            parts.setdefault(_rest(row.params, column), []).append(row)
        for rest, rows in parts.items():
            for metric, title, unit, fmt in metrics:
                tables.append(_metric_table(suite, hardware, task, rows, rest, metric, title,
                                            unit, fmt, column, base_method, group))
    return tables


def _metric_table(suite, hardware, task, rows, rest, metric, title, unit, fmt, column,
                  base_method, group) -> Table:
    methods = ordered(r.method for r in rows)
    columns = sorted(ordered(r.params.get(column) for r in rows), key=_sort_key)
    baselines = {}
    for r in rows:
        if r.method == base_method and r.status == "ok" and r.metrics.get(metric) is not None:
            baselines.setdefault((r.run_id, r.params.get(column)), r.metrics[metric])
            baselines.setdefault((None, r.params.get(column)), r.metrics[metric])
    rest_text = ", ".join(f"{k}={v}" for k, v in rest)
    table = Table(
        key=slug(f"{suite}-{metric}-{hardware}-{rest_text}"),
        title=f"{title}{_unit_suffix(unit)}, {suite}" + (f", {rest_text}" if rest_text else ""),
        caption="",
        task=task, metric=metric, unit=unit, column_header=column, columns=columns,
        rows=methods, hardware=hardware, commit=short_commit(group["git_commit"]),
        extra={"baseline": base_method, "rest": dict(rest)},
    )
    for r in rows:
        col = r.params.get(column)
        table.cells[(r.method, col)] = _metric_cell(r, metric, fmt, baselines, col)
    has_ratio = base_method in methods
    table.caption = (
        f"{title}{_unit_suffix(unit)} on {hardware} (commit {table.commit}); rows are methods, columns "
        f"{column}. "
        + (f"In brackets: ratio to {base_method} in the same run. " if has_ratio
           else f"No ratios: baseline {base_method} was not run. ")
        + "Failed cases show their status (OOM, unavailable, error, ...)."
    )
    return table


def _unit_suffix(unit: str) -> str:
    # Memory cells carry their own binary unit (MiB, GiB); "(bytes)" would misdescribe them.
    return "" if unit in ("bytes", "-") else f" ({unit})"


def _metric_cell(r, metric, fmt, baselines, col) -> Cell:
    cell = Cell(text="", status=r.status, case_id=r.case_id, run_id=r.run_id,
                message=str(r.message or ""))
    if r.status != "ok":
        cell.text = status_text(r.status)
        return cell
    value = r.metrics.get(metric)
    if value is None:
        cell.text = "n/a"
        return cell
    cell.value = float(value)
    base = baselines.get((r.run_id, col), baselines.get((None, col)))
    if base:
        cell.ratio = cell.value / float(base)
        cell.text = f"{fmt(cell.value)} ({cell.ratio:.2f}x)"
    else:
        cell.text = fmt(cell.value)
    return cell


def efficiency_tables(frame: pd.DataFrame, baseline: str | None = None) -> list[Table]:
    """Train words/s, eval words/s and peak memory: methods x seq_len, with baseline ratios."""
    return metric_tables(frame, "efficiency", EFFICIENCY_METRICS, "seq_len", baseline)


def kernel_tables(frame: pd.DataFrame, baseline: str | None = None) -> list[Table]:
    """Kernel timings and throughput: variants x seq_len, split by head_dim and the rest."""
    return metric_tables(frame, "kernels", KERNEL_METRICS, "seq_len", baseline)


def decode_tables(frame: pd.DataFrame, baseline: str | None = None) -> list[Table]:
    """TPOT, TTFT, decode speed and memory: methods x context length C, one table per batch."""
    return metric_tables(frame, "decode", DECODE_METRICS, "context", baseline)


def generic_tables(frame: pd.DataFrame, task: str) -> list[Table]:
    """Tasks without a fixed layout (precision, new ones): every numeric metric, first grid key."""
    rows = frame[frame["task"] == task]
    if rows.empty:
        return []
    column = next((k for p in rows["params"] for k in p), "case")
    metrics = ordered(
        k for m in rows["metrics"] for k, v in m.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool)
    )
    specs = [(m, m, "bytes" if m.endswith("_bytes") else "value",
              fmt_bytes if m.endswith("_bytes") else fmt_plain) for m in metrics]
    if not specs:  # every case failed: still show their statuses
        specs = [("status", "Status", "-", fmt_plain)]
    # No baseline ratios: what "better" means is not known for an arbitrary metric.
    return metric_tables(frame, task, specs, column, baseline="")

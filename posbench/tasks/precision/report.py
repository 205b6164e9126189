"""The precision task's report: the generic tables of its ``METRICS`` (the distinct-value table of
``bias_counts``, perplexity by bias dtype and its cost of ``bias_dtype_ppl``), with the bias
staircases drawn right after the distinct-value table: one ALiBi head's bias after the cast, one
line per dtype, redrawn from the settings the rows stored. A ``bias_counts`` case writes the same
figure beside its run (``run.staircase_chart``). docs/tasks/precision.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from posbench.core.task import find_metric

if TYPE_CHECKING:
    import numpy as np

    from posbench.report.rows import Runs
    from posbench.report.sections import ChartSource, Section
    from posbench.report.table import Table

# torch, numpy, matplotlib and the report's modules are imported inside the functions: the task's
# declaration imports this module, and `bench.py validate` must not wait for them.

DISTINCT = "last_window_distinct@*"  # the distinct-value table's metric family (METRICS)
# The chart leaves float8 out by default: its treads are hundreds of bias units wide at 8192 and
# float8_e4m3fn saturates at 448, so those lines would flatten the y-axis and hide the staircase.
CHART_DTYPES: tuple[str, ...] = ("float32", "float16", "bfloat16")
MAX_BIAS_VALUES = 1 << 26  # n_heads x length of a redrawn bias (256 MB of float32 at most)


def report_sections(runs: Runs, baseline=None) -> list[Section]:
    """The default section (``metric_section``), with the staircases after each table of the
    distinct-value family (its family table, or a member a suite asked for by name)."""
    from posbench.report.sections import metric_section

    declared = runs.tasks.get("precision").METRICS
    section = metric_section(runs, "precision", baseline)
    for block in section.blocks:
        if find_metric(declared, block.table.metric) is declared[DISTINCT]:
            block.charts.append(_staircase_source(runs, block.table))
    return [section]


def _staircase_source(runs: Runs, table: Table) -> ChartSource:
    def source():
        cases = {(c.run_id, c.case_id) for c in table.cells.values() if c.case_id}
        return staircase_charts([r for r in runs.rows.to_dict("records") if (r["run_id"], r["case_id"]) in cases])

    return source


def staircase_charts(rows: list[dict]) -> list[tuple[str, str, Any]]:
    """The staircases of the ``bias_counts`` rows behind a report table, redrawn from each row's
    stored settings (the bias is a pure function of them): one per chosen head, once per distinct
    setting (every ALiBi method has the same bias). ``(file stem, title, Figure)`` triples."""
    out, seen = [], set()
    for r in rows:
        series = r.get("series") or {}
        s = series.get("settings") if isinstance(series, dict) else None
        if r.get("status") != "ok" or not isinstance(s, dict):
            continue
        for chart in series.get("charts") if isinstance(series.get("charts"), list) else []:
            if not _drawable(s, chart):
                continue  # a stored row may hold anything: what cannot be redrawn within bounds is left out
            key = (s["n_heads"], s["length"], chart["head"], tuple(chart["dtypes"]))
            if key in seen:
                continue
            seen.add(key)
            fig, _, _ = staircase_figure(s["n_heads"], s["length"], chart["head"], dtypes=chart["dtypes"])
            out.append(
                (
                    f"precision-staircase-head{chart['head']}-{s['n_heads']}x{s['length']}",
                    f"ALiBi bias staircase, head {chart['head']} of {s['n_heads']}",
                    fig,
                )
            )
    return out


def _drawable(settings: dict, chart) -> bool:
    """Whether a stored chart can be redrawn: whole numbers in range (heads x positions within
    ``MAX_BIAS_VALUES``), a head among them, dtypes the analysis knows."""
    from posbench.tasks.precision.analysis import DTYPES

    def whole(x, low=1):
        return isinstance(x, int) and not isinstance(x, bool) and low <= x <= MAX_BIAS_VALUES

    n_heads, length = settings.get("n_heads"), settings.get("length")
    return (
        whole(n_heads)
        and whole(length)
        and n_heads * length <= MAX_BIAS_VALUES
        and isinstance(chart, dict)
        and whole(chart.get("head"), 0)
        and chart["head"] < n_heads
        and isinstance(chart.get("dtypes"), list)
        and bool(chart["dtypes"])
        and all(isinstance(d, str) and d in DTYPES for d in chart["dtypes"])
    )


def staircase_figure(
    n_heads: int, length: int, head: int, last: int = 192, dtypes: Iterable = CHART_DTYPES
) -> tuple[Any, np.ndarray, dict[str, np.ndarray]]:
    """Step plot of one head's bias over its last ``last`` positions, one line per dtype (names or
    torch dtypes): (Figure, positions, values by dtype).

    The picture SambaNova uses to show the collapse: float32 is a straight ramp, the narrow types
    flat treads. Each dtype keeps its own colour, marker and line style
    (``posbench.report.charts.line_style``): where float16 still matches float32 the two lines
    coincide, and both must stay visible.
    """
    import numpy as np
    import torch

    # Figure + its own Agg canvas rather than pyplot: no global backend switch, no figure registry
    # to leak into, and it works headless.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from posbench.core.alibi_math import slopes_tensor
    from posbench.report.charts import line_style, staggered
    from posbench.tasks.precision.analysis import DTYPES, bloom_bias, check_int, check_settings

    names, (head,) = check_settings(n_heads, length, 1, dtypes, [head])
    check_int("last", last, 1)
    last = min(last, length)
    bias32 = bloom_bias(n_heads, length, "float32")[head, length - last :]  # (last,)
    positions = np.arange(length - last, length)
    values = {n: bias32.to(DTYPES[n]).to(torch.float64).numpy() for n in names}

    fig = Figure(figsize=(8, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for index, (name, v) in enumerate(values.items()):
        ax.step(
            positions,
            v,
            where="post",
            label=name,
            linewidth=1.2,
            markersize=6,
            markerfacecolor="none",
            markevery=staggered(index, len(values), last),
            gid=f"method:{name}",
            **line_style(index),
        )
    slope = slopes_tensor(n_heads)[head].item()
    ax.set_title(f"ALiBi bias of head {head} (slope {slope:.3g}) after the cast, last {last} of {length} positions")
    ax.set_xlabel("key position")
    ax.set_ylabel("bias value (slope x position)")
    ax.legend(title="dtype")
    ax.grid(alpha=0.3)
    return fig, positions, values

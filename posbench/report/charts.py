"""Charts drawn from report tables with matplotlib (Agg backend).

Each function returns its ``Figure`` (``save_figure`` writes PNG and SVG); lines carry a ``gid``
(``method:<name>``, ``failed:<name>``) for tests; the values plotted are the table cells'. Every
method has its own colour, marker and line style; error bars wherever rows hold a spread; memory
in GiB from zero, perplexity on a log axis (docs/reports.md).
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: CI runners and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from posbench.report import numbers as fmt  # noqa: E402
from posbench.report.table import Table  # noqa: E402

FIGSIZE = (6.4, 4.4)
UNAVAILABLE = " (unavailable)"

# Ten colours, ten markers, four dashes: (colour, marker, dash) never repeats before 20 lines.
COLORS = [f"C{i}" for i in range(10)]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]
LINESTYLES = ["-", "--", "-.", ":"]

BAR_NOTES = {
    "ratio": "bars: 95% interval of the ratio to {baseline} (paired in time: rounds or windows, see the table)",
    "spread": "bars: {spread}",
}


def line_style(index: int) -> dict:
    """Colour, marker and line style of the ``index``-th method of a chart (suite order)."""
    return {"color": COLORS[index % len(COLORS)], "marker": MARKERS[index % len(MARKERS)],
            "linestyle": LINESTYLES[index % len(LINESTYLES)]}


def marker_size(index: int) -> float:
    """Hollow markers shrink along the method order, so markers at one point nest, none hidden."""
    return max(11.0 - 1.5 * index, 4.0)


def staggered(index: int, count: int, points: int, marks: int = 12) -> tuple[int, int]:
    """``markevery`` for a long curve: about ``marks`` markers, each of ``count`` curves starting at
    its own offset, so curves that coincide show their markers side by side."""
    step = max(1, points // marks)
    return (index * step // max(count, 1), step)


def caption(fig, hardware: str, commit: str, note: str = "") -> None:
    # The device and commit travel with the picture: charts get pasted without their report.
    text = f"{hardware} · commit {commit}" + (f" · {note}" if note else "")
    fig.text(0.01, 0.01, text, fontsize=7, color="0.35", ha="left", va="bottom")


def new_figure():
    fig, ax = plt.subplots(figsize=FIGSIZE)
    fig.subplots_adjust(left=0.16, bottom=0.17, top=0.88, right=0.97)
    return fig, ax


def _scale(table: Table) -> float:
    """Divide a table's values by this to plot them: memory in GiB, everything else as is."""
    return fmt.GIB if table.fmt == "bytes" else 1.0


def is_perplexity(table: Table) -> bool:
    """A perplexity chart (log y): perplexity values, lower is better; not a difference of two
    (declared without a direction)."""
    return table.fmt == "ppl" and table.higher_is_better is False


def perplexity_axis(ax) -> None:
    """The y convention of every perplexity chart: log scale, ticks as plain numbers (minor ones
    labelled too when the range is under a couple of decades)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _mark_failed(ax, xs, label: str, color) -> None:
    """An 'x' at the top edge of the axes for each grid point that ran out of memory or failed.

    y is in axes coordinates (1.0 = top) so the mark stays visible whatever the data range.
    """
    if not xs:
        return
    top = blended_transform_factory(ax.transData, ax.transAxes)
    (marks,) = ax.plot(xs, [1.0] * len(xs), linestyle="none", marker="x", markersize=9,
                       markeredgewidth=2, color=color, transform=top, clip_on=False,
                       label=f"_failed {label}")
    marks.set_gid(f"failed:{label}")


def plot_rows(ax, table: Table, methods: dict | None = None) -> str:
    """One line per table row through its numeric cells; failed cells become top-edge marks, an
    unavailable method only a legend entry. Returns the error bars drawn: ``ratio``, ``spread`` or ""."""
    scale = _scale(table)
    cells = [table.cell(row, col) for row in table.rows for col in table.columns]
    # one kind of bar per chart; a spread of zero width (one window) draws nothing and is not named
    kind = ("ratio" if any(c.ratio_interval is not None for c in cells)
            else "spread" if any(c.spread is not None and c.spread[1] > c.spread[0] for c in cells) else "")
    any_failed = False
    for index, row in enumerate(table.rows):
        name = (methods or {}).get(row, row)
        xs, ys, failed, statuses = [], [], [], set()
        err_lo, err_hi = [], []
        for col in table.columns:
            cell = table.cell(row, col)
            statuses.add(cell.status)
            if cell.value is not None:
                xs.append(col)
                ys.append(cell.value / scale)
                lo, hi = _ratio_error(cell) if kind == "ratio" else _spread_error(cell)
                err_lo.append(lo / scale)
                err_hi.append(hi / scale)
            elif cell.status not in ("ok", "missing", "unavailable"):
                failed.append(col)
        label = row
        if not xs and statuses == {"unavailable"} and not row.endswith(UNAVAILABLE):
            label = row + UNAVAILABLE
        style = line_style(index)
        (line,) = ax.plot(xs, ys, markersize=marker_size(index), markerfacecolor="none", markeredgewidth=1.3,
                          label=label, **style)
        line.set_gid(f"method:{name}")
        if any(err_lo) or any(err_hi):
            bars = ax.errorbar(xs, ys, yerr=[err_lo, err_hi], fmt="none", ecolor=style["color"], capsize=3,
                               elinewidth=1)
            for segments in bars.lines[2]:  # the vertical bar segments (a LineCollection)
                segments.set_gid(f"errorbar:{name}")
        _mark_failed(ax, failed, name, style["color"])
        any_failed = any_failed or bool(failed)
    if any_failed:
        (proxy,) = ax.plot([], [], linestyle="none", marker="x", color="0.3", label="x: OOM / failed")
        proxy.set_gid("legend:failed")
    return kind


def _ratio_error(cell) -> tuple[float, float]:
    """Error bar (below, above) of a cell from the 95% interval of its ratio to the baseline,
    mapped onto its value (value x bound / ratio): how far the method's line may sit relative
    to the baseline's, the quantity interleaved rounds measure well. (0, 0) without an interval."""
    if cell.ratio_interval is None or not cell.ratio or cell.value is None:
        return 0.0, 0.0
    lo, hi = cell.ratio_interval
    return max(cell.value - cell.value * lo / cell.ratio, 0.0), max(cell.value * hi / cell.ratio - cell.value, 0.0)


def _spread_error(cell) -> tuple[float, float]:
    """Error bar (below, above) from the spread the row holds (min-max, or ± std); (0, 0) without."""
    if cell.spread is None or cell.value is None:
        return 0.0, 0.0
    lo, hi = cell.spread
    return max(cell.value - lo, 0.0), max(hi - cell.value, 0.0)


def bar_note(kind: str, table: Table) -> str:
    if not kind:
        return ""
    return BAR_NOTES[kind].format(baseline=table.baseline,
                                  spread=table.spread or "the spread the rows hold")


def numeric_columns(table: Table) -> bool:
    return bool(table.columns) and all(isinstance(c, (int, float)) for c in table.columns)


def metric_chart(table: Table) -> plt.Figure:
    """A metric (words/s, memory, ms) against sequence length, one line per method.

    Lengths are usually powers of two, so the x axis is log base 2. Memory is plotted in GiB from
    zero; a perplexity on a log axis (``perplexity_axis``).
    """
    fig, ax = new_figure()
    kind = plot_rows(ax, table)
    if numeric_columns(table) and min(table.columns) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    label = table.title.split(",")[0]
    if table.fmt == "bytes":
        top = max([y for line in ax.get_lines() if (line.get_gid() or "").startswith("method:")
                   for y in line.get_ydata()] + [0.0])
        ax.set_ylim(0, top * 1.1 or 1.0)  # from zero, with the tallest point clear of the frame
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))  # GiB, as the axis label says
    elif is_perplexity(table):
        perplexity_axis(ax)
    else:  # the axis reads like the table: the metric's declared format (25.8k)
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.number(v, table.fmt)))
    ax.set_xlabel(f"{table.column_header} (tokens)" if table.column_header == "seq_len" else table.column_header)
    ax.set_ylabel(label)
    ax.set_title(table.title, fontsize=10)
    ax.grid(True, alpha=0.3, which="both" if is_perplexity(table) else "major")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit, bar_note(kind, table))
    return fig


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> dict[str, Path]:
    """Write ``stem.png`` and ``stem.svg`` under ``out_dir`` and close the figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for ext in ("png", "svg"):
        paths[ext] = out_dir / f"{stem}.{ext}"
        fig.savefig(paths[ext], dpi=120 if ext == "png" else None)
    plt.close(fig)
    return paths

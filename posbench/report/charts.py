"""Charts drawn from report tables with matplotlib (Agg backend).

Speed, time and memory as grouped bars from zero, each annotated with its ratio to the baseline;
other metrics as lines (perplexity: log axis; counts and costs from zero). Artists carry a ``gid``
(``method:<name>``, ``failed:<name>``, ``errorbar:<name>``) for tests; values are the table cells'
(docs/reports.md).
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: CI runners and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402
from matplotlib.ticker import Formatter, LogFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from posbench.core.files import write_figure  # noqa: E402
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
    return {
        "color": COLORS[index % len(COLORS)],
        "marker": MARKERS[index % len(MARKERS)],
        "linestyle": LINESTYLES[index % len(LINESTYLES)],
    }


def marker_size(index: int) -> float:
    """Hollow markers shrink along the method order, so markers at one point nest, none hidden."""
    return max(11.0 - 1.5 * index, 4.0)


def staggered(index: int, count: int, points: int, marks: int = 12) -> tuple[int, int]:
    """``markevery`` for a long curve: about ``marks`` markers, each curve at its own offset."""
    step = max(1, points // marks)
    return (index * step // max(count, 1), step)


# Metrics drawn as bars from zero: a paper's speed and memory figures (ALiBi, Figure 1).
BAR_UNITS = {"words/s", "tokens/s", "bytes", "ms", "s", "TFLOP/s", "FLOP", "J", "J/token"}
# Counts drawn as lines: from zero too, so a few percent do not fill the axis.
COUNT_UNITS = {"tokens", "steps", "sequences", "values", "examples"}
LOG_SPAN = 10.0  # a cost axis turns log when the dearest point costs more than this times the cheapest
HATCHES = ["", "//", "..", "xx", "\\\\", "++", "oo", "--", "||", "**"]


def caption(fig, hardware: str, commit: str, note: str = "") -> None:
    # The device and commit travel with the picture: charts get pasted without their report.
    # Wrapped to the figure's width (about 150 characters of 7 pt per 6.4 in), never cut.
    text = f"{hardware} · commit {commit}" + (f" · {note}" if note else "")
    width = int(fig.get_figwidth() * 19)
    fig.text(0.01, 0.01, "\n".join(textwrap.wrap(text, width)), fontsize=7, color="0.35", ha="left", va="bottom", gid="caption")


def fit(fig) -> None:
    """Lay out ``fig`` so titles, labels and the caption lie inside it: tight layout above the
    caption's height. Call last, after every artist is added."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    foot = max([t.get_window_extent(renderer).y1 for t in fig.texts if t.get_gid() == "caption"] + [0.0])
    fig.tight_layout(rect=(0, min(foot / fig.bbox.height + 0.01, 0.4), 1, 1))


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


def cost_axis(ax, costs, axis: str = "x") -> tuple[str, bool]:
    """Put ``costs`` on an honest ``axis``: linear from zero, or log (said in the label by the
    caller) when they span more than ``LOG_SPAN``. Returns (the caption's spread note, log)."""
    finite = [c for c in costs if c is not None and math.isfinite(c) and c > 0]
    if not finite:
        return "", False
    low, high = min(finite), max(finite)
    log = high / low > LOG_SPAN
    if log:
        getattr(ax, f"set_{axis}scale")("log")
    else:  # from zero, the dearest point clear of the frame; 1e-4 s as "1.0 x 1e-4", not "0.00010"
        getattr(ax, f"set_{axis}lim")(0, high * 1.1)
        ax.ticklabel_format(axis=axis, style="sci", scilimits=(-3, 4))
    return f"costs within {high / low:.2f}x of the cheapest", log


def _mark_failed(ax, xs, label: str, color) -> None:
    """An 'x' at the top edge (axes coordinates: visible whatever the data range) per failed point."""
    if not xs:
        return
    top = blended_transform_factory(ax.transData, ax.transAxes)
    (marks,) = ax.plot(
        xs,
        [1.0] * len(xs),
        linestyle="none",
        marker="x",
        markersize=9,
        markeredgewidth=2,
        color=color,
        transform=top,
        clip_on=False,
        label=f"_failed {label}",
    )
    marks.set_gid(f"failed:{label}")


def plot_rows(ax, table: Table, methods: dict | None = None) -> str:
    """One line per table row through its numeric cells; failed cells become top-edge marks, an
    unavailable method only a legend entry. Returns the error bars drawn: ``ratio``, ``spread`` or ""."""
    scale = _scale(table)
    cells = [table.cell(row, col) for row in table.rows for col in table.columns]
    # one kind of bar per chart; a spread of zero width (one window) draws nothing and is not named
    kind = (
        "ratio"
        if any(c.ratio_interval is not None for c in cells)
        else "spread"
        if any(c.spread is not None and c.spread[1] > c.spread[0] for c in cells)
        else ""
    )
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
        (line,) = ax.plot(
            xs, ys, markersize=marker_size(index), markerfacecolor="none", markeredgewidth=1.3, label=label, **style
        )
        line.set_gid(f"method:{name}")
        if any(err_lo) or any(err_hi):
            bars = ax.errorbar(xs, ys, yerr=[err_lo, err_hi], fmt="none", ecolor=style["color"], capsize=3, elinewidth=1)
            for segments in bars.lines[2]:  # the vertical bar segments (a LineCollection)
                segments.set_gid(f"errorbar:{name}")
        _mark_failed(ax, failed, name, style["color"])
        any_failed = any_failed or bool(failed)
    if any_failed:
        (proxy,) = ax.plot([], [], linestyle="none", marker="x", color="0.3", label="x: OOM / failed")
        proxy.set_gid("legend:failed")
    return kind


def _ratio_error(cell) -> tuple[float, float]:
    """Error bar (below, above) of a cell: its ratio's 95% interval mapped onto its value
    (value x bound / ratio); (0, 0) without an interval."""
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
    return BAR_NOTES[kind].format(baseline=table.baseline, spread=table.spread or "the spread the rows hold")


def numeric_columns(table: Table) -> bool:
    return bool(table.columns) and all(isinstance(c, (int, float)) for c in table.columns)


class UniqueFormatter(Formatter):
    """Ticks in ``label``'s format, with more significant digits where two would read alike
    (``12.7k`` twice on a zoomed axis, ``0.00`` for every tick of a tiny difference)."""

    def __init__(self, label):
        self.label = label

    def __call__(self, value, pos=None):
        return self.label(value)

    def format_ticks(self, values):
        labels = [self.label(v) for v in values]
        for digits in range(3, 10):
            if len(set(labels)) == len(labels):
                break
            labels = [_minus_zero(f"{v:.{digits}g}") for v in values]
        return labels


def _minus_zero(text: str) -> str:
    return "0" if text in ("-0", "−0") else text


def table_formatter(table: Table) -> Formatter:
    """The y ticks of a table's chart: GiB numbers for memory, else the metric's own format."""
    if table.fmt == "bytes":
        return UniqueFormatter(lambda v: _minus_zero(f"{v:g}"))
    return UniqueFormatter(lambda v: _minus_zero(fmt.number(v, table.fmt)))


def is_bar(table: Table) -> bool:
    """Speed, time and memory: bars from zero (their size is what a reader compares)."""
    return table.unit in BAR_UNITS


def metric_chart(table: Table) -> plt.Figure:
    """A metric against the table's column (sequence length): grouped bars for speed, time and
    memory (``bar_chart``); else one line per method, log-2 x, perplexity on a log y, memory and
    counts from zero."""
    if is_bar(table):
        return bar_chart(table)
    fig, ax = new_figure()
    kind = plot_rows(ax, table)
    if numeric_columns(table) and min(table.columns) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    label = table.title.split(",")[0]
    if table.fmt == "bytes" or table.unit in COUNT_UNITS:
        top = max(
            [y for line in ax.get_lines() if (line.get_gid() or "").startswith("method:") for y in line.get_ydata()] + [0.0]
        )
        ax.set_ylim(0, top * 1.1 or 1.0)  # from zero, with the tallest point clear of the frame
        ax.yaxis.set_major_formatter(table_formatter(table))  # GiB, as the axis label says
    elif is_perplexity(table):
        perplexity_axis(ax)
    else:  # the axis reads like the table: the metric's declared format (25.8k)
        ax.yaxis.set_major_formatter(table_formatter(table))
    ax.set_xlabel(f"{table.column_header} (tokens)" if table.column_header == "seq_len" else table.column_header)
    ax.set_ylabel(label)
    ax.set_title(table.title, fontsize=10, wrap=True)
    ax.grid(True, alpha=0.3, which="both" if is_perplexity(table) else "major")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit, bar_note(kind, table))
    fit(fig)
    return fig


def bar_label(cell) -> str:
    """A bar's note: its ratio to the baseline, with the interval where the table has one."""
    if cell.ratio is None:
        return ""
    said = f"{cell.ratio:.2f}x"
    if cell.ratio_interval is not None:
        lo, hi = cell.ratio_interval
        said += f" [{lo:.2f}, {hi:.2f}]"
    return f"{said} {fmt.UNPAIRED}" if cell.unpaired else said


def bar_chart(table: Table) -> plt.Figure:
    """Grouped bars from zero: one group per column (length), one bar per method (its own colour
    and hatch), each bar annotated with its ratio to the baseline (and interval); failed cells an
    'x' on the axis, an unavailable method a legend entry only."""
    scale = _scale(table)
    fig, ax = new_figure()
    cells = [table.cell(row, col) for row in table.rows for col in table.columns]
    kind = (
        "ratio"
        if any(c.ratio_interval is not None for c in cells)
        else "spread"
        if any(c.spread is not None and c.spread[1] > c.spread[0] for c in cells)
        else ""
    )
    width = 0.8 / max(len(table.rows), 1)
    handles, labels, notes, failed_any = [], [], [], False
    for index, row in enumerate(table.rows):
        color, hatch = COLORS[index % len(COLORS)], HATCHES[index % len(HATCHES)]
        xs, ys, err, failed, statuses = [], [], ([], []), [], set()
        for group, col in enumerate(table.columns):
            cell = table.cell(row, col)
            statuses.add(cell.status)
            x = group - 0.4 + width * (index + 0.5)
            if cell.value is not None:
                xs.append(x)
                ys.append(cell.value / scale)
                lo, hi = _ratio_error(cell) if kind == "ratio" else _spread_error(cell)
                err[0].append(lo / scale)
                err[1].append(hi / scale)
                notes.append((x, cell.value / scale + hi / scale, bar_label(cell)))
            elif cell.status not in ("ok", "missing", "unavailable"):
                failed.append(x)
        bars = ax.bar(xs, ys, width=width * 0.9, color=color, hatch=hatch, edgecolor="0.2", linewidth=0.6)
        for patch in bars.patches:
            patch.set_gid(f"method:{row}")
        if any(err[0]) or any(err[1]):
            lines = ax.errorbar(xs, ys, yerr=list(err), fmt="none", ecolor="0.15", capsize=2, elinewidth=0.9)
            for segments in lines.lines[2]:
                segments.set_gid(f"errorbar:{row}")
        if failed:
            failed_any = True
            (marks,) = ax.plot(
                failed,
                [0.0] * len(failed),
                linestyle="none",
                marker="x",
                markersize=9,
                markeredgewidth=2,
                color=color,
                clip_on=False,
                label=f"_failed {row}",
            )
            marks.set_gid(f"failed:{row}")
        label = row
        if not xs and statuses == {"unavailable"} and not row.endswith(UNAVAILABLE):
            label = row + UNAVAILABLE
        handles.append(Rectangle((0, 0), 1, 1, facecolor=color, hatch=hatch, edgecolor="0.2", linewidth=0.6))
        labels.append(label)
    if failed_any:
        (proxy,) = ax.plot([], [], linestyle="none", marker="x", color="0.3", label="x: OOM / failed")
        proxy.set_gid("legend:failed")
        handles.append(proxy)
        labels.append("x: OOM / failed")
    for x, top, text in notes:
        if text:
            ax.annotate(
                text,
                (x, top),
                xytext=(0, 2),
                textcoords="offset points",
                rotation=90,
                ha="center",
                va="bottom",
                fontsize=6,
                gid="ratio",
            )
    ax.set_xticks(range(len(table.columns)), [str(c) for c in table.columns])
    ax.set_xlim(-0.5, len(table.columns) - 0.5)
    tops = [y for y in ys_all(ax) if math.isfinite(y)]
    high, low = max(tops + [0.0]), min(tops + [0.0])  # from zero; a negative value (a bad row) below it
    ax.set_ylim(low * 1.1 if math.isfinite(low * 1.1) else low, (high * 1.1 if math.isfinite(high * 1.1) else high) or 1.0)
    ax.yaxis.set_major_formatter(table_formatter(table))  # memory in GiB, as the axis label says
    ax.set_xlabel(f"{table.column_header} (tokens)" if table.column_header == "seq_len" else table.column_header)
    ax.set_ylabel(table.title.split(",")[0])
    ax.set_title(table.title, fontsize=10, wrap=True)
    ax.grid(True, axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    note = bar_note(kind, table)
    if notes and any(text for *_, text in notes):
        note = (
            f"above each bar: ratio to {table.baseline}"
            + (" [95% interval]" if kind == "ratio" else "")
            + (f"; {note}" if note else "")
        )
    caption(fig, table.hardware, table.commit, note)
    fit(fig)
    _headroom(fig, ax)
    return fig


def ys_all(ax) -> list[float]:
    """Tops of the bars and error bars of ``ax`` (data units)."""
    tops = [p.get_height() for p in ax.patches if (p.get_gid() or "").startswith("method:")]
    for c in ax.collections:
        if (c.get_gid() or "").startswith("errorbar:"):
            tops += [float(seg[:, 1].max()) for seg in c.get_segments()]
    return tops


def _headroom(fig, ax) -> None:
    """Raise the y limit until every bar's note lies inside the axes (notes keep their size in points)."""
    renderer = fig.canvas.get_renderer()
    for _ in range(4):
        fig.canvas.draw()
        top = max([a.get_window_extent(renderer).y1 for a in ax.texts] + [0.0])
        if top <= ax.bbox.y1 - 2:
            return
        low, high = ax.get_ylim()
        # the notes' pixel height is fixed: grow the range by the share of the axes they overflow
        raised = low + (high - low) * (1 + (top - ax.bbox.y1 + 4) / max(ax.bbox.height, 1.0)) * 1.05
        if not math.isfinite(raised):
            return  # a bar near the float limit (a bad row): its note may leave the axes
        ax.set_ylim(low, raised)


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> dict[str, Path]:
    """Write ``stem.png`` and ``stem.svg`` under ``out_dir`` and close the figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for ext in ("png", "svg"):
        paths[ext] = out_dir / f"{stem}.{ext}"
        write_figure(fig, paths[ext], dpi=120 if ext == "png" else None)  # never written through a link
    plt.close(fig)
    return paths

"""Charts drawn from report tables with matplotlib (Agg backend: no display needed).

Every function returns the ``Figure`` so tests (and notebooks) can inspect what a reader would
see before anything is written; ``save_figure`` writes PNG and SVG and closes it. Lines carry a
``gid`` (``method:<name>``, ``failed:<name>``, ``L_train``) so a test can find them without
depending on colours or legend order. The y-values plotted are the table cells' values, so a
chart never disagrees with its table.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: CI runners and GPU boxes have no display
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from . import fmt  # noqa: E402
from .rows import Runs  # noqa: E402
from .table import Table, by_params, short_commit, slug, task_groups  # noqa: E402

FIGSIZE = (6.4, 4.4)


def _caption(fig, hardware: str, commit: str) -> None:
    # The device and commit travel with the picture: charts get pasted without their report.
    fig.text(0.01, 0.01, f"{hardware} · commit {commit}", fontsize=7, color="0.35", ha="left", va="bottom")


def _new_figure():
    fig, ax = plt.subplots(figsize=FIGSIZE)
    fig.subplots_adjust(left=0.16, bottom=0.17, top=0.88, right=0.97)
    return fig, ax


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


def _plot_rows(ax, table: Table, methods: dict | None = None) -> None:
    """One line per table row through its numeric cells; failed cells become top-edge marks.

    An unavailable method has no points; it still gets a legend entry saying so, and no marks
    (an 'x' means "ran and failed here", which it did not).
    """
    any_failed = False
    for row in table.rows:
        name = (methods or {}).get(row, row)
        xs, ys, failed, statuses = [], [], [], set()
        err_lo, err_hi = [], []
        for col in table.columns:
            cell = table.cell(row, col)
            statuses.add(cell.status)
            if cell.value is not None:
                xs.append(col)
                ys.append(cell.value)
                lo, hi = _ratio_error(cell)
                err_lo.append(lo)
                err_hi.append(hi)
            elif cell.status not in ("ok", "missing", "unavailable"):
                failed.append(col)
        label = row if xs or statuses != {"unavailable"} else f"{row} (unavailable)"
        (line,) = ax.plot(xs, ys, marker="o", markersize=4, label=label)
        line.set_gid(f"method:{name}")
        if any(err_lo) or any(err_hi):
            bars = ax.errorbar(xs, ys, yerr=[err_lo, err_hi], fmt="none", ecolor=line.get_color(), capsize=3,
                               elinewidth=1)
            for segments in bars.lines[2]:  # the vertical bar segments (a LineCollection)
                segments.set_gid(f"errorbar:{name}")
        _mark_failed(ax, failed, name, line.get_color())
        any_failed = any_failed or bool(failed)
    if any_failed:
        (proxy,) = ax.plot([], [], linestyle="none", marker="x", color="0.3", label="x: OOM / failed")
        proxy.set_gid("legend:failed")


def _ratio_error(cell) -> tuple[float, float]:
    """Error bar (below, above) of a cell from the 95% interval of its ratio to the baseline,
    mapped onto its value (value x bound / ratio): how far the method's line may sit relative
    to the baseline's, the quantity interleaved rounds measure well. (0, 0) without an interval."""
    if cell.ratio_interval is None or not cell.ratio or cell.value is None:
        return 0.0, 0.0
    lo, hi = cell.ratio_interval
    return max(cell.value - cell.value * lo / cell.ratio, 0.0), max(cell.value * hi / cell.ratio - cell.value, 0.0)


def _numeric_columns(table: Table) -> bool:
    return bool(table.columns) and all(isinstance(c, (int, float)) for c in table.columns)


def metric_chart(table: Table) -> plt.Figure:
    """A metric (words/s, memory, ms) against sequence length, one line per method.

    Lengths are usually powers of two, so the x axis is log base 2.
    """
    fig, ax = _new_figure()
    _plot_rows(ax, table)
    if _numeric_columns(table) and min(table.columns) > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    # The axis reads like the table: the metric's declared format (25.8k, 977 MiB).
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: fmt.number(v, table.fmt)))
    ax.set_xlabel(f"{table.column_header} (tokens)" if table.column_header == "seq_len" else table.column_header)
    ax.set_ylabel(table.title.split(",")[0])
    ax.set_title(table.title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _caption(fig, table.hardware, table.commit)
    return fig


def ppl_chart(table: Table) -> plt.Figure:
    """The paper's Figure 1: perplexity against L_valid (log x), a dashed line at L_train."""
    fig, ax = _new_figure()
    _plot_rows(ax, table, table.extra.get("methods"))
    ax.set_xscale("log", base=2)
    if _numeric_columns(table):
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    l_train = table.extra.get("L_train")
    if l_train:
        vline = ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}")
        vline.set_gid("L_train")
    best = table.extra.get("best_ppl")
    if best is not None and not table.extra.get("bound_row"):  # the per-column bound is drawn as a row
        ax.axhline(best, color="0.6", linestyle=":", linewidth=1, label=f"best achievable ({best:.2f})").set_gid("best_ppl")
    values = [c.value for c in table.cells.values() if c.value is not None]
    # Sinusoidal perplexity explodes past L_train; a log y keeps the good methods readable then.
    if values and min(values) > 0 and max(values) / min(values) > 10:
        ax.set_yscale("log")
    ax.set_xlabel("L_valid, evaluation length (tokens)")
    ax.set_ylabel("Perplexity (lower is better)")
    ax.set_title(table.title, fontsize=9)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    _caption(fig, table.hardware, table.commit)
    return fig


def position_loss_charts(runs: Runs) -> list[tuple[str, plt.Figure]]:
    """Loss by token position, one figure per (suite, hardware, L_train, mode) at the longest L_valid.

    Shows *where* a method breaks down: a curve that climbs after the L_train line extrapolates
    badly. Returns ``(file stem, figure)`` pairs.
    """
    out = []
    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        for params, members in by_params(group).items():
            out += _position_figures(suite, hardware, dict(params), members)
    return out


def _position_figures(suite, hardware, params, members):
    longest: dict[str, int] = {}
    for r in members:
        for key in r.series.get("per_position_loss", {}) or {}:
            mode, _, length = key.rpartition("@")
            if length.isdigit():
                longest[mode] = max(longest.get(mode, 0), int(length))
    commit = short_commit(r.git_commit for r in members)
    l_train = params.get("L_train")
    figures = []
    for mode, length in longest.items():
        fig, ax = _new_figure()
        for r in members:
            losses = (r.series.get("per_position_loss") or {}).get(f"{mode}@{length}")
            if losses:
                (line,) = ax.plot(range(1, len(losses) + 1), losses, linewidth=1, label=r.method)
                line.set_gid(f"method:{r.method}")
        if l_train:
            ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}").set_gid("L_train")
        ax.set_xlabel("Token position in the evaluation window")
        ax.set_ylabel("Loss (nats per token)")
        ax.set_title(f"Loss by position, L_train = {l_train}, {mode} @ L_valid = {length}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        _caption(fig, hardware, commit)
        figures.append((slug(f"{suite}-position-loss-L{l_train}-{mode}-{length}-{hardware}"), fig))
    return figures


def save_figure(fig: plt.Figure, out_dir: Path, stem: str) -> dict[str, Path]:
    """Write ``stem.png`` and ``stem.svg`` under ``out_dir`` and close the figure."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {}
    for ext in ("png", "svg"):
        paths[ext] = out_dir / f"{stem}.{ext}"
        fig.savefig(paths[ext], dpi=120 if ext == "png" else None)
    plt.close(fig)
    return paths

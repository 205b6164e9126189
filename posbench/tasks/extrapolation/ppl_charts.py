"""The charts of the extrapolation report's perplexity tables: the paper's Figure 1 (perplexity
against L_valid, ``ppl_chart``) after each table, and the loss by token position at the longest
L_valid (``position_loss_charts``); ``ppl_sections`` puts tables and charts together.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posbench.protocols.train_eval.evaluations import curves
from posbench.report.names import slug
from posbench.report.rows import Runs
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from posbench.report.sections import Block, ChartSource, Section
    from posbench.report.table import Table

# The report's modules (pandas, matplotlib) are imported inside the functions: the task's
# declaration imports this module, and `bench.py validate` must not wait for them.


def ppl_sections(runs: Runs) -> list[Section]:
    """The task's report section: each perplexity table with its two charts."""
    from posbench.report.sections import Section

    return [Section("Extrapolation", "extrapolation", [ppl_block(runs, t) for t in extrapolation_tables(runs)])]


def ppl_block(runs: Runs, table: Table) -> Block:
    """Figure 1 of this table, then the loss by position of the same mode and grid point."""
    from posbench.report.sections import Block

    sources: list[ChartSource] = []
    if any(c.value is not None for c in table.cells.values()):
        sources.append(lambda: [(table.key, table.title, ppl_chart(table))])

    def position_loss():
        return [(stem, f"Loss by position: {table.title}", fig) for stem, fig in position_loss_charts(runs, table)]

    sources.append(position_loss)
    return Block(table, sources)


def ppl_chart(table: Table) -> Figure:
    """The paper's Figure 1: perplexity against L_valid (log x, log y), a dashed line at L_train."""
    from posbench.report.charts import bar_note, caption, fit, new_figure, numeric_columns, perplexity_axis, plot_rows

    fig, ax = new_figure()
    kind = plot_rows(ax, table, table.extra.get("methods"))
    ax.set_xscale("log", base=2)
    if numeric_columns(table):
        ax.set_xticks(table.columns, [str(c) for c in table.columns])
    l_train = table.extra.get("L_train")
    if l_train:
        vline = ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}")
        vline.set_gid("L_train")
    best = table.extra.get("best_ppl")
    if best is not None and not table.extra.get("bound_row"):  # the per-column bound is drawn as a row
        ax.axhline(best, color="0.6", linestyle=":", linewidth=1, label=f"best achievable ({best:.2f})").set_gid("best_ppl")
    perplexity_axis(ax)
    ax.set_xlabel("L_valid, evaluation length (tokens)")
    ax.set_ylabel("Perplexity (lower is better, log scale)")
    ax.set_title(table.title, fontsize=9, wrap=True)
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=8)
    caption(fig, table.hardware, table.commit, bar_note(kind, table))
    fit(fig)
    return fig


def position_loss_charts(runs: Runs, table: Table | None = None) -> list[tuple[str, Figure]]:
    """Loss by token position, one figure per (suite, hardware, L_train, mode) at the longest L_valid.

    Shows *where* a method breaks down: a curve that climbs after the L_train line extrapolates
    badly. ``table``: only the figure that belongs to that extrapolation table (same suite,
    machine, grid point and evaluation mode); the report draws it right below the table.
    Returns ``(file stem, figure)`` pairs.
    """
    from posbench.report.grouping import by_params, task_groups

    out = []
    for suite, hardware, group in task_groups(runs.rows, "extrapolation"):
        if table is not None and (suite, hardware) != (table.extra.get("suite"), table.hardware):
            continue
        for params, members in by_params(group).items():
            if table is not None and dict(params) != table.extra.get("params"):
                continue
            out += _position_figures(suite, hardware, dict(params), members, table)
    return out


def _curve_key(key: str) -> tuple[str, int, bool] | None:
    """``nonoverlapping@512`` / ``sliding@512@interp`` -> (mode, L_valid, interpolated)."""
    mode, _, rest = key.partition("@")
    length, _, tail = rest.partition("@")
    return (mode, int(length), tail == "interp") if length.isascii() and length.isdigit() and len(length) < 13 else None


def _position_figures(suite, hardware, params, members, table: Table | None = None):
    from posbench.report.charts import caption, fit, line_style, new_figure, staggered
    from posbench.report.grouping import short_commit

    longest: dict[tuple[str, bool], int] = {}
    for r in members:
        for key in curves(r):
            parsed = _curve_key(key)
            if parsed is not None:
                mode, length, interp = parsed
                longest[(mode, interp)] = max(longest.get((mode, interp), 0), length)
    if table is not None:
        mode, _stride, interp = table.extra.get("mode", ("nonoverlapping", None, False))
        longest = {k: v for k, v in longest.items() if k == (mode, bool(interp))}
    commit = short_commit(r.git_commit for r in members)
    l_train = params.get("L_train")
    order = list(dict.fromkeys(r.method for r in members))
    figures = []
    for (mode, interp), length in longest.items():
        key = f"{mode}@{length}" + ("@interp" if interp else "")
        fig, ax = new_figure()
        for r in members:
            losses = curves(r).get(key)
            if losses:
                index = order.index(r.method)
                (line,) = ax.plot(
                    range(1, len(losses) + 1),
                    losses,
                    linewidth=1.2,
                    markersize=6,
                    markerfacecolor="none",
                    markevery=staggered(index, len(order), len(losses)),
                    label=r.method,
                    **line_style(index),
                )
                line.set_gid(f"method:{r.method}")
        if l_train:
            ax.axvline(l_train, color="0.3", linestyle="--", linewidth=1, label=f"L_train = {l_train}").set_gid("L_train")
        ax.set_xlabel("Token position in the evaluation window")
        ax.set_ylabel("Loss (nats per token)")
        what = f"{mode}" + (", interpolated" if interp else "")
        ax.set_title(f"Loss by position, L_train = {l_train}, {what} @ L_valid = {length}", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        caption(fig, hardware, commit)
        fit(fig)
        stem = f"{suite}-position-loss-L{l_train}-{mode}" + ("-interp" if interp else "") + f"-{length}-{hardware}"
        figures.append((slug(stem), fig))
    return figures

"""Honest cost axes: the frontier's starts at zero (or is a labelled log axis) with the costs'
spread in the caption, and counts on line charts start at zero."""

import matplotlib.pyplot as plt

from posbench.report import charts
from posbench.report.frontier import Point, frontier_chart
from posbench.report.table import Cell, Table, TableSpec
from posbench.tasks.extrapolation.frontier_report import verdict_table

KEY = ("frontier", "CPU", "time_s=60", 512)


def P(method, L, ppls, cost):
    return Point(method, L, dict(enumerate(ppls)), cost, 1e8)


def footer(fig) -> str:
    return " ".join(t.get_text() for t in fig.texts if t.get_gid() == "caption").replace("\n", " ")


def test_frontier_cost_axis_starts_at_zero_and_says_the_spread():
    # costs 3% apart: before, matplotlib zoomed the x axis onto them and they looked far apart
    table = verdict_table(
        KEY,
        [
            P("alibi", 64, [10.0, 10.2, 10.4], 1.00e-4),
            P("rotary", 64, [11.0, 11.2, 11.4], 1.03e-4),
            P("sinusoidal", 64, [14.0, 14.5, 15.0], 1.01e-4),
        ],
    )
    fig = frontier_chart(table)
    (ax,) = fig.axes
    assert ax.get_xscale() == "linear" and ax.get_xlim()[0] == 0
    assert ax.get_xlim()[1] >= 1.03e-4  # every point inside
    assert "from zero" in ax.get_xlabel()
    assert "costs within 1.03x of the cheapest" in footer(fig)
    plt.close(fig)


def test_frontier_cost_axis_turns_log_when_costs_span_decades():
    table = verdict_table(KEY, [P("alibi", 64, [10.0, 10.2, 10.4], 1e-5), P("rotary", 128, [9.0, 9.2, 9.4], 1e-3)])
    fig = frontier_chart(table)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "log scale" in ax.get_xlabel()
    assert "costs within 100.00x of the cheapest" in footer(fig)
    plt.close(fig)


def test_cost_axis_without_costs_is_left_alone():
    fig, ax = charts.new_figure()
    assert charts.cost_axis(ax, [None, float("nan"), 0.0]) == ("", False)
    assert ax.get_xscale() == "linear"
    plt.close(fig)


def test_count_line_chart_starts_at_zero():
    """Training steps under one time budget (a count of the compute each method got), 2% apart."""
    spec = TableSpec(task="extrapolation", metric="train_steps", unit="steps", fmt="int", column_header="L_train")
    table = Table(spec, key="steps", title="Training steps, frontier", columns=[64, 128], rows=["a", "b"])
    for row, base in (("a", 1000.0), ("b", 1020.0)):
        for col in table.columns:
            table.cells[(row, col)] = Cell(text=f"{base:g}", value=base)
    fig = charts.metric_chart(table)
    assert fig.axes[0].get_ylim()[0] == 0 and fig.axes[0].get_ylim()[1] >= 1020
    plt.close(fig)

"""The lengthgen task's frontier (``posbench.report.frontier``): per hardware, budget, algorithmic
task and test length n, each (method, L_train)'s exact match (over seeds) against its training
seconds per example and peak memory, the Pareto front, the verdict table and a chart. Shown for
runs with a compute budget (time_s, flops) or several seeds.
"""
from __future__ import annotations

from posbench.report.frontier import (Quality, accuracy_cells, fraction, frontier_points, frontier_section, frontier_table,
                                      per_unit)
from posbench.report.rows import Runs
from posbench.report.sections import Section
from posbench.report.table import Table

QUALITY = Quality("lengthgen", "exact match", "exact match", "n", False, fraction, "Exact-match accuracy",
                  cost_unit="s / example")


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, task, n) of the runs that ask for a frontier."""
    points = frontier_points(runs, "lengthgen", accuracy_cells,
                             lambda m: per_unit(m, "train_seconds", "train_examples"),
                             of=lambda r: str(r.params.get("task", "")))
    return [frontier_table(QUALITY, suite, hw, budget, n, pts, of) for (suite, hw, budget, of, n), pts in points.items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's lengthgen frontier: each verdict table with its chart (none when no run asks)."""
    return frontier_section("Frontier: exact match against cost", "lengthgen", frontier_tables(runs))

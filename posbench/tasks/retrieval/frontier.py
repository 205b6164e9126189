"""The retrieval task's frontier (``posbench.report.frontier``): per hardware, budget, probe and
target length L_valid, each (method, L_train)'s accuracy (over seeds) against its training
seconds per token and peak memory, the Pareto front, the verdict table and a chart. Shown for
runs with a compute budget (time_s, flops) or several seeds.
"""
from __future__ import annotations

from posbench.report.frontier import (Quality, accuracy_cells, fraction, frontier_points, frontier_section, frontier_table,
                                      per_unit)
from posbench.report.rows import Runs
from posbench.report.sections import Section
from posbench.report.table import Table

QUALITY = Quality("retrieval", "accuracy", "acc", "L_valid", False, fraction, "Retrieval accuracy (exact answers)")


def frontier_tables(runs: Runs) -> list[Table]:
    """A verdict table per (suite, hardware, budget, probe, L_valid) of the runs that ask for a frontier."""
    points = frontier_points(runs, "retrieval", accuracy_cells, lambda m: per_unit(m, "train_seconds", "train_tokens"),
                             of=lambda r: str(r.params.get("probe", "")))
    return [frontier_table(QUALITY, suite, hw, budget, n, pts, of) for (suite, hw, budget, of, n), pts in points.items()]


def frontier_sections(runs: Runs) -> list[Section]:
    """The report's retrieval frontier: each verdict table with its chart (none when no run asks)."""
    return frontier_section("Frontier: retrieval accuracy against cost", "retrieval", frontier_tables(runs))

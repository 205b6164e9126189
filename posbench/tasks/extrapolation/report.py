"""The extrapolation task's report, its sections in order: the perplexity tables with their charts
(``ppl_tables``, ``ppl_charts``), the loss by dependency distance (``distance_report``), the
attention diagnostics (``posbench.protocols.attention_diagnostics``), then the frontier of runs
with a compute budget or several seeds (``frontier_report``); and the tables printed at the end of
a run. The cells ``bench.py compare`` reads: ``posbench.protocols.train_eval.evaluations``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posbench.protocols.attention_diagnostics import attention_sections, attention_tables
from posbench.report.rows import Runs
from posbench.tasks.extrapolation.distance_report import copy_gain_tables, distance_sections, distance_tables
from posbench.tasks.extrapolation.frontier_report import frontier_sections, frontier_tables
from posbench.tasks.extrapolation.ppl_charts import ppl_sections
from posbench.tasks.extrapolation.ppl_tables import extrapolation_tables

if TYPE_CHECKING:
    from posbench.report.sections import Section
    from posbench.report.table import Table

REPORT_ORDER = 20  # after efficiency, before kernels


def report_sections(runs: Runs, baseline=None) -> list[Section]:
    """The perplexity tables with their charts (no ratios: a perplexity is read against the bound),
    then the frontier of runs with a compute budget or several seeds."""
    return ppl_sections(runs) + distance_sections(runs) + attention_sections(runs, "extrapolation") + frontier_sections(runs)


def summary_tables(runs: Runs) -> list[Table]:
    """The perplexity tables, the loss by dependency distance, then the frontier's verdict tables,
    printed at the end of a run."""
    return (
        extrapolation_tables(runs)
        + distance_tables(runs)
        + copy_gain_tables(runs)
        + attention_tables(runs, "extrapolation")
        + frontier_tables(runs)
    )

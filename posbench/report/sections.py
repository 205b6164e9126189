"""The sections of a report: one or more per task present, each a list of tables with their charts.

By default a task's metric tables (``metric_section``); a task with a layout of its own hands back
its own (``Block``, ``Section``). The tasks come resolved with the rows (``Runs.tasks``), never imported.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from posbench.core.task import Task
from posbench.report import charts
from posbench.report.rows import Runs
from posbench.report.table import Table
from posbench.report.table_corpus import name_corpus
from posbench.report.tabulate import details_tables, metric_tables

# A chart source: called once when the report is written, returns (file stem, title, Figure) triples.
ChartSource = Callable[[], list]


@dataclass
class Block:
    """A table and the charts that belong to it; the report prints them together, in this order."""

    table: Table
    charts: list[ChartSource] = field(default_factory=list)
    heading: str = ""  # a sub-heading above the table (a task's own blocks: one per probe, say)


@dataclass
class Section:
    """One part of a task's report: its blocks, and (in its first section) its housekeeping for
    the appendix."""

    heading: str
    task: str
    blocks: list[Block] = field(default_factory=list)
    details: list[Table] = field(default_factory=list)


def collect_sections(runs: Runs, baseline: str | None = None) -> list[Section]:
    """The sections of every task present, in the tasks' declared order; empty ones are left out.

    ``baseline``: the method ratios divide by; None takes each run's own (run.json).
    """
    present = set(runs.rows["task"].dropna())
    tasks = {name: runs.tasks.get(name) for name in present}
    sections: list[Section] = []
    for name in sorted(present, key=lambda n: (_place(tasks[n]), n)):
        task = tasks[name]
        if task is not None and task.report_sections is not None:
            sections += task.report_sections(runs, baseline)
        else:
            sections.append(metric_section(runs, name, baseline))
    for section in sections:
        if section.task in present and not any(s.details for s in sections if s.task == section.task):
            section.details = details_tables(runs, section.task)
    name_corpus([b.table for s in sections for b in s.blocks], runs.rows)
    return [s for s in sections if s.blocks or s.details]


def collect_tables(runs: Runs, baseline: str | None = None) -> list[tuple[str, list[Table]]]:
    """(section heading, tables) of every section with tables, in report order (no appendix)."""
    return [(s.heading, [b.table for b in s.blocks]) for s in collect_sections(runs, baseline) if s.blocks]


def _place(task: Task | None) -> int:
    return task.REPORT_ORDER if task is not None else Task.LAST


def metric_section(runs: Runs, name: str, baseline: str | None = None) -> Section:
    """The default section of task ``name``: a table per metric its declarations and its suite's
    ``metrics`` ask for (``posbench.report.tabulate.metric_tables``), methods x its ``REPORT_COLUMN``,
    each followed by its charts. A task this installation does not know gets one too (every number
    its rows carry), headed by its name."""
    task = runs.tasks.get(name)
    heading, column = (task.title, task.REPORT_COLUMN) if task is not None else (name.capitalize(), "")
    return Section(heading, name, metric_blocks(runs, metric_tables(runs, name, baseline, column=column)))


def metric_blocks(runs: Runs, tables: list[Table]) -> list[Block]:
    """Each table with its charts (``table_charts``)."""
    return [Block(t, table_charts(runs, t)) for t in tables]


def table_charts(runs: Runs, table: Table) -> list[ChartSource]:
    """The line chart of a table with numbers against a numeric axis (a task's own charts come from
    its own ``report_sections``)."""
    out: list[ChartSource] = []
    has_values = any(c.value is not None for c in table.cells.values())
    if has_values and table.columns and all(isinstance(c, (int, float)) for c in table.columns):
        out.append(lambda: [(table.key, table.title, charts.metric_chart(table))])
    return out

"""The one table model: a declared ``TableSpec``, and the ``Table`` of one run's rows that shows it.

A ``TableSpec`` says what a kind of table shows (task, metric, unit, number format, what its
rows and columns are, which way is better); a task declares each of its own once and reuses it.
A ``Table`` is one instance of a spec: its key, title and caption, its columns, rows and
``Cell``s, and where its numbers came from (hardware, commit, baseline, the grid point it
shares). Each cell keeps its number, its text and the row it came from; failed cases show their
status. Built from rows by ``posbench.report.tabulate`` (or a task's own report section),
rendered by ``posbench.report.render``, drawn by ``posbench.report.charts``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# What a table's ``spread`` says its cells' spreads are (charts name it under their error bars).
SPREAD_MIN_MAX = "min-max over measured windows"
SPREAD_STD = "± std over seeds"
SPREAD_SEED_CI = "95% t interval over seeds"  # posbench.report.stats.SEED_INTERVAL


@dataclass
class Cell:
    text: str
    value: float | None = None  # what a chart plots; None when there is no number
    status: str = "ok"  # the case's (or evaluation's) status
    case_id: str | None = None
    run_id: str | None = None
    message: str = ""
    ratio: float | None = None  # value / baseline value, same run and grid point
    ratio_interval: tuple[float, float] | None = None  # a confidence interval of the ratio
    spread: tuple[float, float] | None = None  # (low, high) the row holds: min-max of windows, or ± std of seeds
    unpaired: bool = False  # the ratio divides values timed apart from the baseline's (``paired_with``)
    median: float | None = None  # the row's own median; ``value`` differs where a paired ratio set it
    resolution: tuple[float, float] | None = None  # memory: the values not told apart from ``value``


@dataclass(frozen=True)
class TableSpec:
    """What a kind of table shows, declared once and shared by every table of that kind."""

    task: str
    metric: str  # the metric (or a name for what the cells hold: "details", "frontier")
    unit: str = ""
    fmt: str = "plain"  # posbench.report.numbers format of the values (charts' axis labels)
    column_header: str = ""  # what the columns are: a grid parameter ("seq_len") or a word
    row_header: str = "method"  # what the rows are (the run-details appendix: cases)
    higher_is_better: bool | None = None  # the metric's direction (None: never compared)


@dataclass
class Table:
    """One table of a ``TableSpec``: ``Table(SPEC, key=..., title=..., columns=..., hardware=...)``."""

    spec: TableSpec
    key: str  # file stem, unique within a report
    title: str
    caption: str = ""
    columns: list = field(default_factory=list)
    rows: list[str] = field(default_factory=list)
    cells: dict = field(default_factory=dict)  # (row, column) -> Cell
    hardware: str = ""
    commit: str = ""
    baseline: str | None = None  # the method the ratios divide by (None: no ratios)
    rest: dict = field(default_factory=dict)  # the other grid parameters the table's rows share
    extra: dict = field(default_factory=dict)  # a task's own chart data (its charts read it)
    spread: str = ""  # what the cells' spreads are (SPREAD_MIN_MAX, SPREAD_STD): charts name it
    pooled: bool = False  # cells sum the counts of every run of a case: no run supersedes another
    note: str = ""  # one line under the table: the methods left out as unavailable here
    corpus: str = ""  # ``Corpus: ...`` of its rows (``posbench.report.table_corpus``), "" where they name none
    resolution: str = ""  # memory: the smallest difference claimed (``max(5%, 8 MiB)``), "" for the rest

    def cell(self, row: str, column) -> Cell:
        return self.cells.get((row, column), Cell(text="—", status="missing"))

    # The spec's fields, read through the table that shows it.

    @property
    def task(self) -> str:
        return self.spec.task

    @property
    def metric(self) -> str:
        return self.spec.metric

    @property
    def unit(self) -> str:
        return self.spec.unit

    @property
    def fmt(self) -> str:
        return self.spec.fmt

    @property
    def column_header(self) -> str:
        return self.spec.column_header

    @property
    def row_header(self) -> str:
        return self.spec.row_header

    @property
    def higher_is_better(self) -> bool | None:
        return self.spec.higher_is_better

"""Task registry: what a suite's ``task:`` key names, and the contract every task module meets.

A task module (``posbench/tasks/<name>/``, a package owning its helpers) defines:

- ``Settings``: a pydantic model subclassing ``TaskSettings`` (so it inherits the runner's own
  settings: timeout, memory limit, threads, seed). Suite ``settings`` merged with the profile's
  override are validated against it; unknown keys are rejected.
- ``Params``: a pydantic model of one grid point (e.g. ``seq_len``); a suite's grid axes must be
  its fields, and every grid value is validated against the field.
- ``METRICS``: ``{metric name: Metric(...)}``, the one declaration of each metric's title, unit,
  direction (higher is better, lower is better, or not compared) and number format; tables,
  charts, progress lines and ``bench.py compare`` all read it. A key ``"ppl@*"`` declares a family
  (``ppl@nonoverlapping@512``, ...). A suite's ``metrics`` (the ones its table and progress lines
  show) must be keys of it.
- ``run(case: Case) -> {"metrics": {name: number | None}, "series": {name: list | dict}}``. It
  runs in a worker process (``posbench.run.worker``), one case per process; with ``nproc`` > 1 (or
  under torchrun) on every rank at once, with the process group already joined
  (``posbench.engine.distributed``), and rank 0's return value is the result. The worker has already
  set torch's CPU threads and loaded the suite's method folders (``worker.prepare``). Raise
  ``Diverged`` for a non-finite loss; ``MemoryError`` / ``torch.cuda.OutOfMemoryError`` become
  status ``oom``.

Optionally, a task whose ``Settings`` has ``pairing`` defines ``run_group(cases, round) ->
{case id: worker result}``: with ``pairing: windows`` the runner hands it every case of one grid
point and round in one worker process (``posbench.engine.windows``); a case that fails there gets its own
failure result (``posbench.run.worker.failure``) and the others go on.

Optionally, a task whose suite ``methods`` are its own variants rather than position methods (the
kernels task) also defines ``METHODS`` (the variant names) and ``unavailable(case) -> reason |
None``. ``Task`` below is the typed form of the required parts; ``get`` checks a module against it
and hands back a ``LoadedTask``, which answers every optional part with its default.

Its part of the report is optional too (``LoadedTask.REPORT``): by default ``bench.py report``
gives a task one section of tables built from its ``METRICS`` declarations (each followed by its
charts), headed by its name and placed after the tasks that declare a place; ``bench.py compare``
compares the numbers in its rows' ``metrics``. A task with a layout of its own declares it here,
so the report and compare never name a task.

Modules are imported lazily, so a worker imports only its own task (the test task does not
import torch, which keeps the runner's tests fast). Names starting with ``_`` are test-only and
hidden from listings.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Optional, Protocol, runtime_checkable

from posbench.core.outcome import Diverged, Unavailable  # noqa: F401  (a task raises them; re-exported)
from pydantic import BaseModel, ConfigDict, Field

TASKS: dict[str, str] = {
    "efficiency": "posbench.tasks.efficiency",
    "extrapolation": "posbench.tasks.extrapolation",
    "precision": "posbench.tasks.precision",
    "kernels": "posbench.tasks.kernels",
    "decode": "posbench.tasks.decode",
    "retrieval": "posbench.tasks.retrieval",
    "lengthgen": "posbench.tasks.lengthgen",
    "_testing": "posbench.tasks._testing",
}


Format = Literal["count", "bytes", "ms", "ppl", "plain", "int"]


@dataclass(frozen=True)
class Metric:
    """One metric, declared once in its task's ``METRICS``.

    ``higher_is_better``: True (words/s, TFLOP/s), False (memory, time, perplexity) or None
    (counts and spreads such as ``n_params`` or ``train_wps_min``: shown, never compared).
    ``fmt`` names a formatter of ``posbench.report.numbers`` (``count``: 25.8k; ``bytes``: always GiB, named;
    ``ms``/``plain``: 4 significant digits; ``ppl``: 2 decimals; ``int``).

    Where ``bench.py report`` puts it (each task decides its own section):

    - ``table``: a table of its own (methods x the first grid axis) followed by its chart (when the
      columns are numbers), even when the suite's ``metrics`` omit it. A family key ``head@*``
      with ``table`` makes one table of every member the rows carry: the last ``@`` part is the
      column (headed ``axis``), the parts between join the method in the row label
      (``ppl@float32_bias@256`` -> row ``alibi, float32_bias``, column 256).
    - ``shown_in``: the key of the metric whose table already shows this value (the precision
      suite's ``ppl_diff_at_max_len`` is the last column of ``ppl_diff@*``): no table of its own,
      even when the suite's ``metrics`` name it (its progress lines still do).
    - ``appendix``: housekeeping (parameters, steps, threads, batch size): one compact "Appendix:
      run details" table per task, cases x housekeeping metrics, never a table or chart of its own.
      None decides by the declaration: housekeeping when never compared (``higher_is_better``
      None), not a table, not shown elsewhere and not the spread of another metric
      (``<m>_min``/``<m>_max``/``<m>_std`` become the error bars of ``m``).
    - ``charts``: charts that belong to this metric's table and are drawn right after it,
      as ``"module:function"`` names; ``function(rows: list[dict]) -> [(file stem, title, Figure)]``
      gets the stored rows of the table (precision: the bias staircases of its ``bias_counts`` study,
      ``posbench.tasks.precision.staircase:report_charts``).
    """

    title: str
    unit: str
    doc: str
    higher_is_better: Optional[bool] = None
    fmt: Format = "plain"
    table: bool = False
    appendix: Optional[bool] = None
    shown_in: str = ""
    axis: str = ""
    charts: tuple[str, ...] = ()


@runtime_checkable
class Task(Protocol):
    """What a task module provides (see the module docstring)."""

    Settings: type  # a TaskSettings subclass
    Params: type  # a pydantic model of one grid point
    METRICS: dict[str, Metric]
    run: Callable[[Any], dict]


SPREAD_SUFFIX = "_std"  # a seed-averaged metric m carries m_std: its spread over seeds


def find_metric(metrics: dict[str, Metric], name: str) -> Optional[Metric]:
    """The declaration of ``name``: its own key, else its family ``<head>@*`` (``ppl@sliding@512``).

    ``<m>_std`` of a declared ``m`` is declared with it: same unit and format, never compared
    (a spread is not better or worse by itself).
    """
    if name in metrics:
        return metrics[name]
    if name.endswith(SPREAD_SUFFIX):
        base = find_metric(metrics, name[: -len(SPREAD_SUFFIX)])
        if base is None:
            return None
        return replace(base, title=f"{base.title}, std over seeds", doc=f"sample std over seeds of: {base.doc}",
                       higher_is_better=None, table=False)
    head, at, _ = name.partition("@")
    return metrics.get(f"{head}@*") if at else None


SPREAD_SUFFIXES = ("_min", "_max", SPREAD_SUFFIX)


def spread_of(metrics: dict[str, Metric], name: str) -> Optional[str]:
    """The metric ``name`` is a spread of (``train_wps_min`` -> ``train_wps``), if that one is declared."""
    for suffix in SPREAD_SUFFIXES:
        if name.endswith(suffix) and find_metric(metrics, name[: -len(suffix)]) is not None:
            return name[: -len(suffix)]
    return None


def is_housekeeping(metrics: dict[str, Metric], name: str) -> bool:
    """Whether ``name`` belongs in the report's "Appendix: run details" (see ``Metric.appendix``).

    An undeclared metric is housekeeping unless it is a spread of a declared one: the task did
    not ask for a table of it, and the appendix keeps it visible. A member of a family
    (``acc_lo@256`` of ``acc_lo@*``) is one point of a curve, not a run detail, unless its family
    says ``appendix=True``.
    """
    if spread_of(metrics, name) is not None:
        return False
    metric = find_metric(metrics, name)
    if metric is None:
        return True
    if metric.appendix is not None:
        return metric.appendix
    if name not in metrics:  # a family member
        return False
    return metric.higher_is_better is None and not metric.table and not metric.shown_in


def metrics_of(name: str) -> dict[str, Metric]:
    """The ``METRICS`` of task ``name``; an empty dict for a task this installation does not know."""
    try:
        return get(name).METRICS
    except KeyError:
        return {}


def known_model_fields(value: dict) -> dict:
    """Validator of a task's ``model_overrides``: only ``ModelConfig`` fields (the method and its
    options come from the suite, not from overrides)."""
    from dataclasses import fields

    from posbench.core.config import ModelConfig

    allowed = {f.name for f in fields(ModelConfig)} - {"method", "method_options"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"unknown ModelConfig field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return value


class TaskSettings(BaseModel):
    """Settings every task accepts; they steer the runner and the worker rather than the task."""

    model_config = ConfigDict(extra="forbid", strict=True)

    timeout_s: float = Field(600.0, gt=0, description="wall-clock limit of one case's worker process (s)")
    memory_limit_mb: Optional[int] = Field(
        None, ge=1, description="RLIMIT_AS of the worker (virtual address space, MiB; Linux only)"
    )
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads (OMP_NUM_THREADS); default: torch's")
    seed: int = Field(0, description="seed of weights and token ids")
    nproc: int = Field(1, ge=1, description="data-parallel processes per case: the runner launches the case "
                       "through torchrun (one rank per GPU on CUDA); 1: one plain worker process")


def register_task(name: str, module: str) -> None:
    """Make ``task: name`` resolve to the importable module ``module``."""
    if name in TASKS and TASKS[name] != module:
        raise ValueError(f"duplicate task name {name!r}: {TASKS[name]} and {module}")
    TASKS[name] = module


def names(include_hidden: bool = False) -> list[str]:
    return sorted(n for n in TASKS if include_hidden or not n.startswith("_"))


class LoadedTask:
    """A task module seen through the contract: the required parts checked once (``get``), every
    optional part answered with its default when the module leaves it out, so the runner, the
    suite loader, the CLI and the report ask the task and never probe the module.

    Optional parts and their defaults (``OPTIONAL``):

    - ``METHODS``: the task's own variants (kernels) instead of position methods; default None.
    - ``unavailable(case) -> reason | None``: why a case of those variants cannot run here, known
      before any worker starts; default: always available (position methods answer for themselves).
    - ``run_group(cases, round) -> {case id: result}``: the paired-windows group run; default
      None, and ``groups`` is False.
    - ``TIMED``: whether the task's numbers are timings compared between the methods of a grid
      point (ratios to a baseline), so a sweep spread over devices keeps every method of a point
      on one device (``posbench.run.units``); default None: timed when its ``Settings`` pairs
      methods in ``rounds`` or it can ``run_group``.

    The report's parts (``REPORT``; ``runs`` is a ``posbench.report.rows.Runs``):

    - ``TITLE``: the heading of the task's report section; default None: ``title`` is the name,
      capitalised.
    - ``REPORT_ORDER``: where the section stands, lower first; default ``LAST``: after every task
      that declares a place, tasks of the same place by name.
    - ``REPORT_COLUMN``: the grid axis a metric table spreads over its columns; default "": the
      first axis the rows carry.
    - ``report_sections(runs, baseline) -> [posbench.report.sections.Section]``: the task's own
      sections (tables with their charts), replacing the metric tables of its ``METRICS``;
      ``posbench.report.sections.metric_section`` builds those for a task that adds to them.
      Default None.
    - ``summary_tables(runs) -> [posbench.report.table.Table]``: the tables printed at the end of
      a run, replacing the metric tables of the suite's ``metrics``; default None.
    - ``compare_values(row) -> {name: number | None}``: numbers of a stored row that ``bench.py
      compare`` reads beyond its ``metrics`` (a metric of the same name wins); default None.
    """

    LAST = 1000  # the report place of a task that declares none
    REPORT: dict[str, Any] = {"TITLE": None, "REPORT_ORDER": LAST, "REPORT_COLUMN": "", "report_sections": None,
                              "summary_tables": None, "compare_values": None}
    OPTIONAL: dict[str, Any] = {"METHODS": None, "unavailable": None, "run_group": None, "TIMED": None, **REPORT}

    def __init__(self, name: str, module: Any):
        self.name = name
        self.module = module

    def __repr__(self) -> str:
        return f"<task {self.name!r} ({self.module.__name__})>"

    def __getattr__(self, attr: str) -> Any:
        # Settings, Params, METRICS, run and whatever else the module holds (a test's monkeypatch
        # on the module is seen here too: nothing is copied)
        if attr in LoadedTask.OPTIONAL:
            return getattr(self.module, attr, LoadedTask.OPTIONAL[attr])
        return getattr(self.module, attr)

    @property
    def own_methods(self) -> bool:
        """Whether the suite's ``methods`` are this task's variants, not position methods."""
        return self.METHODS is not None

    @property
    def groups(self) -> bool:
        """Whether the task can measure a grid point's methods together (``pairing: windows``)."""
        return self.run_group is not None

    @property
    def timed(self) -> bool:
        """Whether the methods of a grid point are timed against each other (``TIMED``)."""
        if self.TIMED is not None:
            return bool(self.TIMED)
        return "rounds" in self.Settings.model_fields or self.groups

    @property
    def title(self) -> str:
        """The heading of the task's report section."""
        return self.TITLE or self.name.capitalize()

    def unavailable_reason(self, case: Any) -> Optional[str]:
        """Why ``case`` cannot run here, known without a worker (own variants only), or None."""
        check = self.unavailable
        return check(case) if check is not None else None


def find(name: str) -> Optional[LoadedTask]:
    """``get(name)``, or None for a task this installation does not know (rows of another one's)."""
    try:
        return get(name)
    except KeyError:
        return None


def get(name: str) -> LoadedTask:
    """The task through its contract; an unknown name raises ``KeyError``, a module that breaks
    the contract a one-line ``TypeError`` saying what it lacks."""
    if name not in TASKS:
        raise KeyError(name)
    module = importlib.import_module(TASKS[name])
    if not isinstance(module, Task):
        missing = [k for k in ("Settings", "Params", "METRICS", "run") if not hasattr(module, k)]
        raise TypeError(f"task {name!r} ({TASKS[name]}) lacks {', '.join(missing)}; a task module defines "
                        "Settings, Params, METRICS and run(case)")
    bad = next((k for k, v in module.METRICS.items() if not isinstance(v, Metric)), None)
    if bad is not None:
        raise TypeError(f"task {name!r}: METRICS[{bad!r}] is not a posbench.core.task.Metric")
    return LoadedTask(name, module)

"""The task contract: ``Task`` (what a task package declares as ``TASK``), ``Metric`` (one metric,
declared once), ``TaskSettings`` and ``ModelSettings`` with ``case_model_config`` (the settings
block and the model config of every task that builds a model). The registry of task names is
``posbench.tasks``. The contract in full: docs/tasks/contract.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from posbench.core.config import PRESETS, ModelConfig, model_config
from posbench.core.outcome import Diverged, Unavailable  # noqa: F401  (a task raises them; re-exported)

Format = Literal["count", "bytes", "ms", "ppl", "plain", "int"]


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One metric of a task's ``METRICS``: title, unit, direction (``higher_is_better`` None: never
    compared), format (a ``posbench.report.numbers`` formatter) and where the report puts it
    (docs/tasks/contract.md#metrics)."""

    title: str
    unit: str
    doc: str
    higher_is_better: bool | None = None
    fmt: Format = "plain"
    table: bool = False
    appendix: bool | None = None
    shown_in: str = ""
    axis: str = ""
    optional: bool = False  # only some devices give it (a GPU's share of peak): no table of n/a where none did


SPREAD_SUFFIX = "_std"  # a seed-averaged metric m carries m_std: its spread over seeds


def find_metric(metrics: dict[str, Metric], name: str) -> Metric | None:
    """The declaration of ``name``: its own key, else its family ``<head>@*``; ``<m>_std`` of a
    declared ``m`` is declared with it (never compared)."""
    if name in metrics:
        return metrics[name]
    if name.endswith(SPREAD_SUFFIX):
        base = find_metric(metrics, name[: -len(SPREAD_SUFFIX)])
        if base is None:
            return None
        return replace(
            base,
            title=f"{base.title}, std over seeds",
            doc=f"sample std over seeds of: {base.doc}",
            higher_is_better=None,
            table=False,
        )
    head, at, _ = name.partition("@")
    return metrics.get(f"{head}@*") if at else None


SPREAD_SUFFIXES = ("_min", "_max", SPREAD_SUFFIX)
# A seed-averaged metric m also carries m_seed_lo, m_seed_hi: the 95% t interval of its mean over
# seeds (posbench.report.stats.seed_interval); a spread of m, like m_std.
SEED_CI_SUFFIXES = ("_seed_lo", "_seed_hi")


def spread_of(metrics: dict[str, Metric], name: str) -> str | None:
    """The metric ``name`` is a spread of (``train_wps_min`` -> ``train_wps``), if that one is declared."""
    for suffix in SPREAD_SUFFIXES + SEED_CI_SUFFIXES:
        if name.endswith(suffix) and find_metric(metrics, name[: -len(suffix)]) is not None:
            return name[: -len(suffix)]
    return None


def is_housekeeping(metric: Metric | None, own: bool, spread: str | None) -> bool:
    """Whether a metric belongs in the report's "Appendix: run details" (``Metric.appendix``), from
    its declaration (``find_metric``), whether it is declared under its own key (``own``: not a
    family member) and what it is a spread of: an undeclared metric does unless it is a spread, a
    family member does not unless its family says so."""
    if spread is not None:
        return False
    if metric is None:
        return True
    if metric.appendix is not None:
        return metric.appendix
    if not own:  # a family member
        return False
    return metric.higher_is_better is None and not metric.table and not metric.shown_in


@dataclass(frozen=True)
class Declared:
    """What a task's ``METRICS`` say of one metric name a report meets (``declare``)."""

    metric: Metric  # its declaration; an undeclared name gets a plain one: shown, never compared
    housekeeping: bool  # ``is_housekeeping``: the run-details appendix
    spread_of: str | None  # ``spread_of``: the declared metric it is a spread of


@dataclass(frozen=True)
class Declarations:
    """A task's ``METRICS`` (empty for a task this installation does not know) and, for every name
    a report asked about in one ``declare`` call, what they say of it: tables read this, never ask again."""

    metrics: dict[str, Metric]
    of: dict[str, Declared]


def declare(metrics: dict[str, Metric], names: Iterable[str]) -> Declarations:
    """``metrics``' word on each of ``names`` and on each of their own keys."""
    of: dict[str, Declared] = {}
    for name in (*metrics, *names):
        if name not in of:
            found, spread = find_metric(metrics, name), spread_of(metrics, name)
            plain = Metric(title=name, unit="", doc="")  # undeclared: shown, never compared
            of[name] = Declared(found or plain, is_housekeeping(found, name in metrics, spread), spread)
    return Declarations(metrics, of)


def known_model_fields(value: dict) -> dict:
    """Validator of ``model_overrides``: ``ModelConfig`` fields only (method and options come from the suite)."""
    allowed = {f.name for f in fields(ModelConfig)} - {"method", "method_options"}
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise ValueError(f"unknown ModelConfig field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    nullable = {f.name for f in fields(ModelConfig) if f.default is None}
    types = {f.name: str(f.type) for f in fields(ModelConfig)}  # "int", "float | None", "list[int] | None"
    for key, item in value.items():
        if types[key].startswith("list"):
            ok, what = isinstance(item, list) and all(map(_is_int, item)), "a list of integers"
        elif types[key].startswith("float"):
            ok, what = _is_int(item) or isinstance(item, float), "a number"
        else:
            ok, what = _is_int(item), "an integer"
        if not (ok or (item is None and key in nullable)):
            raise ValueError(f"{key} = {item!r}; allowed: {what}" + (" or null" if key in nullable else ""))
    return value


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class TaskSettings(BaseModel):
    """Settings every task accepts; they steer the runner and the worker rather than the task."""

    model_config = ConfigDict(extra="forbid", strict=True)

    timeout_s: float = Field(600.0, gt=0, description="wall-clock limit of one case's worker process (s)")
    memory_limit_mb: int | None = Field(
        None, ge=1, description="RLIMIT_AS of the worker (virtual address space, MiB; Linux only)"
    )
    threads: int | None = Field(None, ge=1, description="torch CPU threads (OMP_NUM_THREADS); default: torch's")
    seed: int = Field(0, description="seed of weights and token ids")
    nproc: int = Field(
        1,
        ge=1,
        description="data-parallel processes per case: the runner launches the case "
        "through torchrun (one rank per GPU on CUDA); 1: one plain worker process",
    )
    flush_denormal: bool = Field(
        True,
        description="CPU float ops flush subnormal floats to zero (torch.set_flush_denormal), as GPU "
        "attention kernels do: some CPUs handle them in microcode (docs/measuring-speed.md); "
        "false: study that cost",
    )


class ModelSettings(TaskSettings):
    """The model a case builds: a preset, overrides of its fields, options per method."""

    model: Literal[tuple(PRESETS)] = Field(description="model preset (posbench.core.model.PRESETS)")  # type: ignore[valid-type]
    # values checked by known_model_fields: as the field's type (window_layers a list, dropout a
    # number), null where the default is
    model_overrides: dict[str, Any] = Field(default_factory=dict, description="ModelConfig fields, e.g. n_layers")
    _known_fields = field_validator("model_overrides")(known_model_fields)
    method_options: dict[str, dict] = Field(
        default_factory=dict, description="per method: constructor options, e.g. {alibi: {bias_dtype: compute}}"
    )


def case_model_config(case, method_options: dict | None = None, **defaults) -> ModelConfig:
    """The ``ModelConfig`` of ``case`` (its settings are ``ModelSettings``): ``defaults`` (e.g. the
    corpus's ``vocab_size``) under the suite's ``model_overrides``; ``method_options`` replace the
    suite's options for this method."""
    s = case.settings
    options = s.method_options.get(case.method, {}) if method_options is None else method_options
    return model_config(s.model, case.method, method_options=options, **{**defaults, **s.model_overrides})


@dataclass(frozen=True)
class Task:
    """What a task package declares as ``TASK``: the four required parts, then every optional
    part with its default (docs/tasks/contract.md); ``register_task`` fills in ``module``."""

    LAST: ClassVar[int] = 1000  # the report place of a task that declares none

    Settings: type  # a TaskSettings subclass: the suite's settings
    Params: type  # a pydantic model of one grid point
    METRICS: dict[str, Metric]
    run: Callable[[Any], dict]  # case -> {"metrics": {...}, "series": {...}}
    METHODS: Sequence[str] | None = None  # the task's own variants instead of position methods
    unavailable: Callable[[Any], str | None] | None = None  # case -> why not here (own variants)
    run_group: Callable[[list, int], dict] | None = None  # (cases, round) -> {case id: result}
    TIMED: bool | None = None  # None: timed when Settings has rounds or the task can run_group
    TITLE: str | None = None  # the report heading; None: the name, capitalised
    REPORT_ORDER: int = LAST
    REPORT_COLUMN: str = ""  # the grid axis of the metric tables' columns; "": the first
    report_sections: Callable[..., list] | None = None  # (runs, baseline) -> [Section]
    summary_tables: Callable[[Any], list] | None = None  # runs -> [Table] printed after a run
    compare_values: Callable[[Any], dict] | None = None  # row -> numbers compare reads beyond metrics
    # (settings, grid) -> (setting, problem, allowed) of a setting no grid point can run with, or
    # None: checked when a suite is validated, so the mistake is one line, not an error row per case
    check_grid: Callable[[Any, dict], tuple[str, str, str] | None] | None = None
    name: str = ""
    module: Any = None

    def __repr__(self) -> str:
        return f"<task {self.name!r} ({self.module.__name__ if self.module is not None else '?'})>"

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
        """Whether the methods of a grid point are timed against each other (one device per point)."""
        if self.TIMED is not None:
            return self.TIMED
        return "rounds" in self.Settings.model_fields or self.groups

    @property
    def title(self) -> str:
        return self.TITLE or self.name.capitalize()

    def unavailable_reason(self, case: Any) -> str | None:
        """Why ``case`` cannot run here, known without a worker (own variants only), or None."""
        return self.unavailable(case) if self.unavailable is not None else None

"""A result row, typed: what a worker returns (``Result``) and what a run folder stores (``Row``).

On disk a row stays one JSON object (``ROW_KEYS``), and a metric's spread, rounds and windows
stay encoded in key names (``m_min``/``m_max``/``m_std``, ``series[m + "_windows"]``,
``m + "_by_round"``, ``m + "_by_window"``, ``metrics["n_rounds"]``).
This module is the one place that spells those names: ``Row.from_json``/``to_json`` round-trip
today's rows unchanged, and readers ask a row for ``spread``, ``by_round``, ``windows``,
``by_window`` or ``n_rounds`` instead of building names themselves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from posbench.core.task import SPREAD_SUFFIXES  # _min, _max over windows or rounds; _std over seeds

# Keys of a row, in the order the runner writes them.
ROW_KEYS = (
    "case_id",
    "suite",
    "task",
    "method",
    "params",
    "status",
    "message",
    "metrics",
    "series",
    "info",
    "settings",
    "device",
    "profile",
    "run_id",
    "started_at",
    "duration_s",
    "posbench_version",
    "git_commit",
    "traceback",
    "round",
)

N_ROUNDS = "n_rounds"  # a merged row's count of ok rounds (``posbench.store.run_rows.merge_rounds``)


@dataclass(frozen=True)
class Spread:
    """What a row says about a metric's spread: ``lo``/``hi`` over windows or rounds, or ``std``
    over seeds (the error bars of a table or chart)."""

    lo: Any = None
    hi: Any = None
    std: Any = None


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def finite_metrics(metrics: dict) -> dict:
    """JSON has no NaN: non-finite numbers become null (the status says what went wrong)."""
    return {k: _finite(v) for k, v in metrics.items()}


@dataclass
class Result:
    """What a worker (or the runner, for a case no worker ran) says about one case."""

    status: str
    message: str = ""
    traceback: str = ""
    metrics: dict = field(default_factory=dict)
    series: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> Result:
        return cls(
            data["status"],
            data.get("message", ""),
            data.get("traceback", ""),
            data.get("metrics", {}),
            data.get("series", {}),
            data.get("info", {}),
        )

    def to_json(self) -> dict:
        return {
            "status": self.status,
            "message": self.message,
            "traceback": self.traceback,
            "metrics": self.metrics,
            "series": self.series,
            "info": self.info,
        }


@dataclass
class Row:
    """One stored row (``ROW_KEYS``). ``present``: the keys its JSON had, so a row written by an
    older posbench (without ``round`` or ``info``) goes back out as it came in."""

    case_id: str
    method: str
    status: str
    params: dict
    metrics: dict
    suite: str | None = None
    task: str | None = None
    message: str | None = None
    series: dict | None = None
    info: dict | None = None
    settings: dict | None = None
    device: str | None = None
    profile: str | None = None
    run_id: str | None = None
    started_at: str | None = None
    duration_s: float | None = None
    posbench_version: str | None = None
    git_commit: str | None = None
    traceback: str | None = None
    round: int | None = None
    extra: dict = field(default_factory=dict)  # keys beyond ROW_KEYS (a reader's ``source``, ``hardware``)
    present: tuple = ROW_KEYS

    @classmethod
    def of_case(
        cls,
        case,
        result: Result | dict,
        started: datetime,
        duration: float,
        commit: str,
        round_: int = 1,
        info: dict | None = None,
    ) -> Row:
        """The row of ``case`` (a ``CaseSpec``) that ``result`` ended; ``info`` joins the result's
        (where a pool slot or an array task ran it). The one place rows are built."""
        from posbench import __version__

        if isinstance(result, dict):
            result = Result.from_json(result)
        return cls(
            case_id=case.id,
            suite=case.suite,
            task=case.task,
            method=case.method,
            params=case.params,
            status=result.status,
            message=result.message,
            metrics=finite_metrics(result.metrics),
            series=result.series,
            info={**(result.info or {}), **info} if info else result.info,
            settings=case.settings,
            device=case.device,
            profile=case.profile,
            run_id=case.run_id,
            started_at=started.isoformat(timespec="seconds"),
            duration_s=round(duration, 3),
            posbench_version=__version__,
            git_commit=commit,
            traceback=result.traceback,
            round=round_,
        )

    @classmethod
    def from_json(cls, data: dict) -> Row:
        names = {f.name for f in fields(cls)} - {"extra", "present"}
        return cls(
            **{k: v for k, v in data.items() if k in names},
            extra={k: v for k, v in data.items() if k not in names},
            present=tuple(data),
        )

    def to_json(self) -> dict:
        out = {k: getattr(self, k) if k in ROW_KEYS else self.extra[k] for k in self.present if k in ROW_KEYS or k in self.extra}
        return out

    # What the names encode, read in one place.
    def spread(self, name: str) -> Spread | None:
        return spread_in(self.metrics, name)

    def by_round(self, name: str) -> list | None:
        return by_round(self.series, name)

    def windows(self, name: str) -> list | None:
        return windows(self.series, name)

    def by_window(self, name: str) -> list | None:
        return by_window(self.series, name)

    @property
    def n_rounds(self) -> int | None:
        return self.metrics.get(N_ROUNDS)


def spread_in(metrics: dict, name: str) -> Spread | None:
    """``metrics``' spread of ``name`` (``name_min``/``name_max``, else ``name_std``), None when it has none."""
    if not isinstance(metrics, dict):
        return None
    lo, hi, std = (metrics.get(name + s) for s in SPREAD_SUFFIXES)
    if lo is None and hi is None and std is None:
        return None
    return Spread(lo, hi, std)


def windows_key(name: str) -> str:
    """``series[windows_key(m)]``: the per-window values of ``m`` one process measured."""
    return f"{name}_windows"


def by_round_key(name: str) -> str:
    """``series[by_round_key(m)]``: a merged row's value of ``m`` in each round (index r-1, null for
    a round without one)."""
    return f"{name}_by_round"


def by_window_key(name: str) -> str:
    """``series[by_window_key(m)]``: a merged row's windows of ``m`` per round, ``{"group",
    "values"}`` (null: a round without an ok row)."""
    return f"{name}_by_window"


def _series(series: Any, key: str) -> Any:
    return series.get(key) if isinstance(series, dict) else None


def windows(series: Any, name: str) -> Any:
    return _series(series, windows_key(name))


def by_round(series: Any, name: str) -> Any:
    return _series(series, by_round_key(name))


def by_window(series: Any, name: str) -> Any:
    return _series(series, by_window_key(name))


def set_rounds(series: dict, name: str, values: list) -> None:
    series[by_round_key(name)] = values


def set_by_window(series: dict, name: str, values: list) -> None:
    series[by_window_key(name)] = values


BOUNDED_SERIES = (windows_key(""), by_round_key(""), by_window_key(""))  # lists a reader bounds (``bounds.MAX_WINDOWS``)


def make_row(
    case, result: Result | dict, started: datetime, duration: float, commit: str, round_: int = 1, info: dict | None = None
) -> dict:
    """``Row.of_case(...)`` as the JSON object ``cases.jsonl`` stores (``ROW_KEYS`` order)."""
    return Row.of_case(case, result, started, duration, commit, round_, info).to_json()

"""One case of ``bench.py compare``: per metric, NEW/BASE and its verdict against the threshold.

Which way is better comes from the task's metric declarations (``Runs.tasks``). With interleaved
rounds, paired windows or several training seeds the ratio carries a bootstrap 95% interval and
a change counts only when the whole interval is beyond the threshold; a case that finished before
and fails now is a regression. Memory is judged with its resolution too
(``posbench.report.resolution``): a difference within it is no change, whatever the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from posbench.core.task import Metric, Task, find_metric
from posbench.report import bootstrap, resolution
from posbench.report import numbers as fmt
from posbench.store.row import by_round, by_window


def _declared(task: str, tasks: dict[str, Task] | None) -> dict[str, Metric]:
    """The ``METRICS`` of ``task``: from the tasks the rows came with; none for a task unknown."""
    known = tasks.get(task) if tasks is not None and task else None
    return known.METRICS if known is not None else {}


def metric_direction(task: str, name: str, tasks: dict[str, Task] | None = None) -> int | None:
    """+1 when higher is better, -1 when lower is better, None for metrics not compared (the
    declaration's; spreads have none: comparing extremes would double the noise-driven alarms)."""
    metric = find_metric(_declared(task, tasks), name) if task else None
    if metric is None or metric.higher_is_better is None:
        return None
    return 1 if metric.higher_is_better else -1


def value_text(task: str, metric: str, value, tasks: dict[str, Task] | None) -> str:
    """A compared value in its metric's declared format ("—" for none)."""
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    declared = find_metric(_declared(task, tasks), metric) if task else None
    return fmt.number(value, declared.fmt if declared else "plain")


@dataclass
class MetricChange:
    """One metric of one case that BASE and NEW hold, and what the comparison says of it."""

    case_id: str
    method: str
    task: str
    metric: str  # a metric name, or "status" for ok <-> failed
    base: float | str | None
    new: float | str | None
    ratio: float | None  # new / base
    verdict: str  # "regression" | "improvement" | "same" | "noise"
    interval: tuple[float, float] | None = None  # bootstrap 95% interval of ratio (rounds)
    basis: str = ""  # "" (the values) or "ratio to <baseline>" (paired in each run)
    memory: bool = False  # a memory metric, judged with its resolution (``is_memory``)
    device: str | None = None  # the device type NEW measured it on (memory's resolution depends on it)


def case_metrics(row, tasks: dict[str, Task] | None = None) -> dict[str, float | None]:
    """Comparable numbers of a row: its metrics, plus those its task reads from the rest of the row
    (``compare_values``, ``posbench.core.task.Task``: e.g. one per evaluation cell, so that
    a cell that ran out of memory is seen even when the runner stored no flat copy of it); a
    stored metric of the same name wins.
    """
    values = {k: v for k, v in row.metrics.items() if v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))}
    name = row.task if isinstance(row.task, str) else ""
    task = tasks.get(name) if tasks is not None and name else None
    if task is not None and task.compare_values is not None:
        for key, value in task.compare_values(row).items():
            values.setdefault(key, value)
    return values


def _verdict(direction: int, ratio: float, threshold: float) -> str:
    gain = ratio if direction > 0 else 1.0 / ratio
    if gain < 1.0 - threshold:
        return "regression"
    if gain > 1.0 + threshold:
        return "improvement"
    return "same"


def _interval_verdict(direction: int, interval: tuple[float, float], ratio: float, threshold: float) -> str:
    """Regression only when the whole interval is beyond 1 - threshold, improvement beyond
    1 + threshold; a point beyond the threshold with an interval reaching back is noise."""
    lo, hi = interval if direction > 0 else (1.0 / interval[1], 1.0 / interval[0])
    if hi < 1.0 - threshold:
        return "regression"
    if lo > 1.0 + threshold:
        return "improvement"
    return "noise" if _verdict(direction, ratio, threshold) != "same" else "same"


def _windows(row, metric: str) -> list | None:
    """The row's paired-windows rounds of ``metric`` (``series[m + "_by_window"]``), if any."""
    values = by_window(row.series, metric)
    return values if isinstance(values, list) and any(values) else None


def _by_seed(row, metric: str) -> list | None:
    """Each training seed's value of ``metric`` in a seed-averaged row (``series[m + "_by_seed"]``)."""
    values = row.series.get(f"{metric}_by_seed") if isinstance(row.series, dict) else None
    return values if isinstance(values, list) else None


def _rounds(row, metric: str) -> list | None:
    windows = _windows(row, metric)
    if windows is not None:  # the values themselves, a list per round
        clusters = bootstrap.value_clusters(windows)
        return clusters if len(bootstrap.pooled(clusters)) >= 2 else None
    values = by_round(row.series, metric)
    if not isinstance(values, list):
        values = _by_seed(row, metric)  # a seed-averaged row: the seed-level spread
    if not isinstance(values, list):
        return None
    values = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return values if len(values) >= 2 else None


def _samples(row, metric: str, base_row) -> tuple[list | None, str]:
    """Samples of ``metric`` and what they are: the ratio to the run's baseline row, paired by
    round (paired windows: by window, a list per round), when there is one; else the values."""
    ours = _rounds(row, metric)
    if ours is None:
        return None, ""
    if base_row is not None:
        theirs = _windows(base_row, metric) or by_round(base_row.series, metric) or _by_seed(base_row, metric)
        mine = _windows(row, metric) or by_round(row.series, metric) or _by_seed(row, metric)
        if isinstance(theirs, list):
            ratios = (
                bootstrap.window_clusters(mine, theirs)
                if bootstrap.is_windowed(mine) or bootstrap.is_windowed(theirs)
                else bootstrap.paired_ratios(mine, theirs)
            )
            if len(bootstrap.pooled(ratios)) >= 2:
                return ratios, f"ratio to {base_row.method}"
    return ours, ""


def _rounds_ratio(base, new, metric: str, base_ref, new_ref) -> tuple | None:
    """(BASE value, NEW value, NEW/BASE, its interval, basis) from the rounds of both sides, or None
    when either lacks rounds; the values are the medians of ratios to the baseline when ``basis``
    says so (paired in each run). One estimator: the values shown are the medians the ratio divides
    and its interval resamples (every window pooled), so NEW/BASE is exactly their quotient and
    never points the other way (a row's stored metric, the median of its rounds' medians, can)."""
    b, b_basis = _samples(base, metric, base_ref)
    n, n_basis = _samples(new, metric, new_ref)
    if b is None or n is None or b_basis != n_basis:
        return None
    mb, mn = bootstrap.median_of(b), bootstrap.median_of(n)
    ratio = fmt.ratio_of(mn, mb)  # None when either is not positive: no ratio, never a regression
    interval = bootstrap.ratio_of_medians_interval(n, b) if ratio is not None else None
    if interval is None or not all(math.isfinite(x) and x > 0 for x in interval):
        return None
    return mb, mn, ratio, interval, n_basis


def compare_case(
    case_id: str, base, new, threshold: float, base_ref=None, new_ref=None, tasks: dict[str, Task] | None = None
) -> list[MetricChange]:
    """Every change of one case from ``base`` to ``new`` (its rows); ``base_ref``/``new_ref``: the
    baseline method's row at the same grid point of each run (None: the values are compared)."""
    if base.status != new.status and "ok" in (base.status, new.status):
        verdict = "regression" if base.status == "ok" else "improvement"
        return [MetricChange(case_id, new.method, new.task, "status", base.status, new.status, None, verdict)]
    if base.status != "ok":
        return []  # failed both times: nothing measured to compare
    changes = []
    base_values, new_values = case_metrics(base, tasks), case_metrics(new, tasks)
    for metric in sorted(set(base_values) | set(new_values)):
        direction = metric_direction(new.task, metric, tasks)
        if direction is None:
            continue
        b, n = base_values.get(metric), new_values.get(metric)
        if b is None and n is None:
            continue
        if b is None or n is None:
            # A number that vanished (an evaluation now OOMs) is lost ground; one that appeared is gained.
            verdict = "regression" if n is None else "improvement"
            changes.append(MetricChange(case_id, new.method, new.task, metric, b, n, None, verdict))
            continue
        ratio = fmt.ratio_of(n, b)
        if ratio is None:
            continue  # a zero, a negative number or an overflow: no meaningful ratio, never a regression
        noisy = _rounds_ratio(base, new, metric, base_ref, new_ref)
        if noisy is not None:
            b_value, n_value, ratio, interval, basis = noisy
            verdict = _interval_verdict(direction, interval, ratio, threshold)
            change = MetricChange(case_id, new.method, new.task, metric, b_value, n_value, ratio, verdict, interval, basis)
        else:
            change = MetricChange(case_id, new.method, new.task, metric, b, n, ratio, _verdict(direction, ratio, threshold))
        if is_memory(new.task, metric, tasks):
            change.memory, change.device = True, str(new.device or "").split(":")[0] or None
            if not resolution.separable(b, n, new.device):  # a re-run of the same code moves it that much
                change.verdict = "same" if change.verdict == "same" else "noise"
        changes.append(change)
    return changes


def is_memory(task: str, name: str, tasks: dict[str, Task] | None = None) -> bool:
    """Whether ``name`` is declared a memory metric (unit ``bytes``): judged with its resolution."""
    metric = find_metric(_declared(task, tasks), name) if task else None
    return metric is not None and metric.unit == "bytes"

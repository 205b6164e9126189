"""``bench.py compare BASE NEW``: per case and metric, NEW/BASE ratios against a threshold.

With interleaved rounds, paired windows or several training seeds the ratio carries a bootstrap 95% interval and a change
counts only when the whole interval is beyond the threshold; a case that finished before and fails
now is a regression; different GPU models are refused unless ``allow_other_hardware``. Which way is
better comes from the tasks' metric declarations, resolved with the rows (``Runs.tasks``).
docs/reports.md (`bench.py compare`).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import pandas as pd

from posbench.core.files import atomic_write_text
from posbench.core.task import Metric, Task, find_metric
from posbench.report import bootstrap
from posbench.report import numbers as fmt
from posbench.report.escape import md_code, md_text
from posbench.report.rows import cpu_model, gpu_name, load_runs
from posbench.store.bounds import RowsError
from posbench.store.row import by_round, by_window
from posbench.store.run_rows import latest


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


def _fmt(task: str, metric: str, value, tasks: dict[str, Task] | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, str):
        return value
    declared = find_metric(_declared(task, tasks), metric) if task else None
    return fmt.number(value, declared.fmt if declared else "plain")


@dataclass
class MetricChange:
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


@dataclass
class ComparisonResult:
    base_dir: str
    new_dir: str
    threshold: float
    changes: list[MetricChange] = field(default_factory=list)
    in_both: list[str] = field(default_factory=list)
    only_in_base: list[str] = field(default_factory=list)
    only_in_new: list[str] = field(default_factory=list)
    not_in_new: list[str] = field(default_factory=list)  # cases of methods NEW did not run (``missing_cases``)
    hardware_warnings: list[str] = field(default_factory=list)
    base_commits: list[str] = field(default_factory=list)
    new_commits: list[str] = field(default_factory=list)
    tasks: dict[str, Task] | None = None  # the runs' tasks (None: looked up by name)

    @property
    def regressions(self) -> list[MetricChange]:
        return [c for c in self.changes if c.verdict == "regression"]

    @property
    def improvements(self) -> list[MetricChange]:
        return [c for c in self.changes if c.verdict == "improvement"]

    @property
    def within_noise(self) -> list[MetricChange]:
        return [c for c in self.changes if c.verdict == "noise"]

    @property
    def exit_code(self) -> int:
        """1 on any regression or any case of BASE missing from NEW (CI fails), else 0."""
        return 1 if self.regressions or self.only_in_base else 0

    def markdown(self) -> str:
        """A summary for a pull request or ``$GITHUB_STEP_SUMMARY``."""
        pct = f"{self.threshold:.0%}"
        lines = [
            "## posbench compare",
            "",
            f"Base: {md_code(self.base_dir)} (commit {md_text(', '.join(self.base_commits) or 'unknown')}); "
            f"new: {md_code(self.new_dir)} (commit {md_text(', '.join(self.new_commits) or 'unknown')}). "
            f"Threshold: {pct} either way.",
            "",
        ]
        lines += [f"> **Warning:** {md_text(w)}" for w in self.hardware_warnings]
        if self.hardware_warnings:
            lines.append("")
        if self.within_noise:
            noise = f"; {len(self.within_noise)} change(s) beyond the threshold are unchanged (within noise)."
        else:  # "0 change(s) ... are unchanged" read as a riddle
            noise = "; no change beyond the threshold." if not (self.regressions or self.improvements) else "."
        lines += [
            f"**{len(self.regressions)} regression(s), {len(self.improvements)} improvement(s)** "
            f"over {len(self.in_both)} case(s) found in both runs{noise}"
            + (f" **{len(self.only_in_base)} case(s) of base are missing from new (failures).**" if self.only_in_base else ""),
            "",
        ]
        for title, items in (
            ("Regressions", self.regressions),
            ("Improvements", self.improvements),
            ("Unchanged (within noise)", self.within_noise),
        ):
            if items:
                lines += [
                    f"### {title}",
                    "",
                    "| case | metric | base | new | new/base | 95% interval |",
                    "| --- | --- | ---: | ---: | ---: | ---: |",
                ]
                for c in items:
                    ratio = fmt.ratio(c.ratio, 3)
                    interval = f"[{fmt.ratio(c.interval[0], 3)[:-1]}, {fmt.ratio(c.interval[1], 3)[:-1]}]" if c.interval else "—"
                    metric = f"{c.metric} ({c.basis})" if c.basis else c.metric
                    # A ratio to the baseline reads as one (0.900x), values in the metric's format.
                    show = (lambda v: fmt.ratio(v, 3)) if c.basis else (lambda v: _fmt(c.task, c.metric, v, self.tasks))
                    lines.append(
                        f"| {md_text(c.case_id)} | {md_text(metric)} | {show(c.base)} | {show(c.new)} | {ratio} | {interval} |"
                    )
                lines.append("")
        for title, ids in (
            ("Only in base: missing from new, failures", self.only_in_base),
            ("Not in new: methods new did not run, or unavailable in base", self.not_in_new),
            ("Only in new", self.only_in_new),
        ):
            if ids:
                lines += [f"### {title} ({len(ids)})", ""] + [f"- {md_code(i)}" for i in ids] + [""]
        return "\n".join(lines)


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


def _compare_rounds(case_id, base, new, metric, direction, threshold, base_ref, new_ref) -> MetricChange | None:
    """NEW/BASE with an interval from the rounds of both, or None when either lacks rounds."""
    b, b_basis = _samples(base, metric, base_ref)
    n, n_basis = _samples(new, metric, new_ref)
    if b is None or n is None or b_basis != n_basis:
        return None
    mb, mn = bootstrap.median_of(b), bootstrap.median_of(n)
    ratio = fmt.ratio_of(mn, mb)  # None when either is not positive: no ratio, never a regression
    interval = bootstrap.ratio_of_medians_interval(n, b) if ratio is not None else None
    if interval is None or not all(math.isfinite(x) and x > 0 for x in interval):
        return None
    return MetricChange(
        case_id,
        new.method,
        new.task,
        metric,
        mb if b_basis else base.metrics.get(metric),
        mn if n_basis else new.metrics.get(metric),
        ratio,
        _interval_verdict(direction, interval, ratio, threshold),
        interval,
        n_basis,
    )


def _compare_case(
    case_id: str, base, new, threshold: float, base_ref=None, new_ref=None, tasks: dict[str, Task] | None = None
) -> list[MetricChange]:
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
        noisy = _compare_rounds(case_id, base, new, metric, direction, threshold, base_ref, new_ref)
        if noisy is not None:
            changes.append(noisy)
            continue
        changes.append(MetricChange(case_id, new.method, new.task, metric, b, n, ratio, _verdict(direction, ratio, threshold)))
    return changes


def _baseline_rows(rows: pd.DataFrame, metas: dict) -> dict[tuple, object]:
    """(source, case_id) -> the row of the run's baseline method at the same grid point (same run), for
    cases of runs whose run.json names a baseline; the baseline's own cases map to nothing."""
    by_point = {}
    for r in rows.to_dict("records"):
        by_point[(r["source"], r["method"], json_key(r["params"]))] = r
    out = {}
    for r in rows.to_dict("records"):
        meta = metas.get(r["source"])
        if meta is None or not meta.baseline or r["method"] == meta.baseline:
            continue
        ref = by_point.get((r["source"], meta.baseline, json_key(r["params"])))
        if ref is not None and ref["status"] == "ok":
            out[(r["source"], r["case_id"])] = SimpleNamespace(**ref)
    return out


def json_key(params) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _latest_per_case(rows: pd.DataFrame) -> dict[str, object]:
    """case_id -> row; when several runs hold a case, the latest (``posbench.report.rows.latest``) counts."""
    return {cid: SimpleNamespace(**r) for cid, r in latest(rows.to_dict("records")).items()}


def _hardware(rows: pd.DataFrame, envs: dict) -> dict[str, set]:
    return {
        "GPU": {g for g in (gpu_name(e) for e in envs.values()) if g},
        "CPU": {c for c in (cpu_model(e) for e in envs.values()) if c},
        "device": {str(d).split(":")[0] for d in rows["device"].dropna()},
    }


def hardware_warnings(base_rows, base_envs, new_rows, new_envs) -> list[str]:
    """One line per hardware property (GPU name, CPU model, device type) that differs."""
    base_hw, new_hw = _hardware(base_rows, base_envs), _hardware(new_rows, new_envs)
    out = []
    for prop in ("GPU", "CPU", "device"):
        if base_hw[prop] != new_hw[prop]:
            b = ", ".join(sorted(base_hw[prop])) or "none"
            n = ", ".join(sorted(new_hw[prop])) or "none"
            out.append(f"{prop} differs: base ran on {b}, new on {n}; ratios compare machines as well as code.")
    return out


class OtherHardware(ValueError):
    """BASE and NEW ran on different GPU models: their ratios would compare GPUs, not code."""


def _gpu_models(envs: dict, rows: pd.DataFrame) -> str:
    models = sorted({g for g in (gpu_name(e) for e in envs.values()) if g})
    if models:
        return ", ".join(models)
    devices = sorted({str(d).split(":")[0] for d in rows["device"].dropna()})
    return "no GPU model recorded" + (f" (device {', '.join(devices)})" if devices else "")


def check_same_gpu(base_rows, base_envs, new_rows, new_envs) -> None:
    """``OtherHardware`` (one line naming both sides' GPU models) when they differ; a run whose
    env.json names no GPU (a CPU run, or a GPU run without NVML) differs from one that names one."""
    base_hw, new_hw = _hardware(base_rows, base_envs), _hardware(new_rows, new_envs)
    if base_hw["GPU"] != new_hw["GPU"]:
        raise OtherHardware(
            f"base and new ran on different GPU models (base: {_gpu_models(base_envs, base_rows)}; new: "
            f"{_gpu_models(new_envs, new_rows)}): their ratios would compare GPUs, not code; compare runs of one "
            "GPU model, or pass --allow-other-hardware to compare them anyway"
        )


def suite_warnings(base_metas: dict, new_metas: dict) -> list[str]:
    """A line per suite whose version differs between the runs (run.json): its results may not
    be comparable, which is what bumping ``version`` says."""
    versions = {}
    for side, metas in (("base", base_metas), ("new", new_metas)):
        for meta in metas.values():
            if meta is not None:
                versions.setdefault(meta.suite, {}).setdefault(side, set()).add(meta.version)
    return [
        f"suite {suite} version differs: base ran v{', v'.join(map(str, sorted(v['base'])))}, new "
        f"v{', v'.join(map(str, sorted(v['new'])))}; the suite says old results may not be comparable."
        for suite, v in versions.items()
        if len(v) == 2 and v["base"] != v["new"]
    ]


# Settings that change no measurement: how long a case may take, how much memory it may hold.
NOT_MEASURED = ("timeout_s", "memory_limit_mb")


class DifferentSettings(ValueError):
    """BASE and NEW were measured with different settings: their ratios would compare settings, not code."""


def _settings(rows: pd.DataFrame, device: bool) -> dict[str, set[str]]:
    """setting -> the values (as JSON) the rows ran with, and (``device``) ``device`` -> their device types."""
    out: dict[str, set[str]] = {}
    for settings in rows["settings"]:
        for key, value in (settings if isinstance(settings, dict) else {}).items():
            if key not in NOT_MEASURED:
                out.setdefault(key, set()).add(json.dumps(value, sort_keys=True, default=str))
    if device:
        out["device"] = {json.dumps(str(d).split(":")[0]) for d in rows["device"].dropna()}
    return out


def settings_differences(base_rows: pd.DataFrame, new_rows: pd.DataFrame, device: bool = True) -> list[str]:
    """``rounds (base 2, new 5)`` per setting that changes a measurement (every setting but
    ``NOT_MEASURED``: windows, rounds, steps, dtype, model, ...; and, ``device``, the device type:
    with ``--allow-other-hardware`` a hardware warning says that one) and differs."""
    base, new = _settings(base_rows, device), _settings(new_rows, device)
    out = []
    for key in sorted(set(base) | set(new)):
        b, n = base.get(key, set()), new.get(key, set())
        if b != n:
            out.append(f"{key} (base {', '.join(sorted(b)) or 'unset'}, new {', '.join(sorted(n)) or 'unset'})")
    return out


def check_same_settings(base_rows: pd.DataFrame, new_rows: pd.DataFrame, device: bool = True) -> None:
    """``DifferentSettings``, one line naming every differing setting with both sides' values."""
    differ = settings_differences(base_rows, new_rows, device)
    if differ:
        raise DifferentSettings(
            f"base and new were measured with different settings: {'; '.join(differ)}; their ratios would "
            "compare settings, not code; compare runs of the same settings, or pass --allow-different-settings "
            "to compare them anyway"
        )


def missing_cases(base: dict, new_rows: pd.DataFrame, new_metas: dict) -> tuple[list[str], list[str]]:
    """(failures, not in new) among BASE's cases that NEW lacks: a failure when NEW ran or meant
    to run the method (it has rows of it, or its run.json lists it) and BASE's case was not
    ``unavailable``; else the method is simply not in NEW (not selected, or unavailable in BASE)."""
    methods = set(new_rows["method"].dropna()) | {m for meta in new_metas.values() if meta is not None for m in meta.methods}
    failed, absent = [], []
    for case_id in sorted(base):
        row = base[case_id]
        (failed if row.method in methods and row.status != "unavailable" else absent).append(case_id)
    return failed, absent


def compare_runs(
    base_dir,
    new_dir,
    threshold: float = 0.05,
    allow_other_hardware: bool = False,
    find_task=None,
    allow_different_settings: bool = False,
) -> ComparisonResult:
    """Compare the runs under ``new_dir`` against those under ``base_dir`` case by case; runs on
    different GPU models raise ``OtherHardware`` unless ``allow_other_hardware``, runs measured
    with different settings ``DifferentSettings`` unless ``allow_different_settings`` (then a
    warning); ``find_task`` as in ``load_runs``."""
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold must be in [0, 1), got {threshold}")
    base_runs, new_runs = load_runs(base_dir, find_task=find_task), load_runs(new_dir, find_task=find_task)
    base_rows, base_envs = base_runs.rows, base_runs.envs
    new_rows, new_envs = new_runs.rows, new_runs.envs
    for side, path, rows in (("base", base_dir, base_rows), ("new", new_dir, new_rows)):
        if len(rows) == 0:
            raise RowsError(f"{path}: the {side} run has no rows (empty cases.jsonl); nothing to compare")
    for what in ("suite", "task"):
        b, n = set(base_rows[what].dropna()), set(new_rows[what].dropna())
        if b != n:
            raise ValueError(
                f"base and new are different {what}s (base: {', '.join(sorted(map(str, b)))}; new: "
                f"{', '.join(sorted(map(str, n)))}); compare runs of the same suite and task"
            )
    if not allow_other_hardware:
        check_same_gpu(base_rows, base_envs, new_rows, new_envs)
    if not allow_different_settings:
        check_same_settings(base_rows, new_rows, not allow_other_hardware)
    base, new = _latest_per_case(base_rows), _latest_per_case(new_rows)
    failed, absent = missing_cases({c: base[c] for c in set(base) - set(new)}, new_rows, new_runs.metas)
    differ = settings_differences(base_rows, new_rows, not allow_other_hardware)
    result = ComparisonResult(
        base_dir=str(base_dir),
        new_dir=str(new_dir),
        threshold=threshold,
        in_both=sorted(set(base) & set(new)),
        only_in_base=failed,
        only_in_new=sorted(set(new) - set(base)),
        not_in_new=absent,
        hardware_warnings=hardware_warnings(base_rows, base_envs, new_rows, new_envs)
        + suite_warnings(base_runs.metas, new_runs.metas)
        + ([f"settings differ: {'; '.join(differ)} (--allow-different-settings)"] if differ else []),
        base_commits=sorted({str(c)[:10] for c in base_rows["git_commit"].dropna()}),
        new_commits=sorted({str(c)[:10] for c in new_rows["git_commit"].dropna()}),
        tasks={**base_runs.tasks, **new_runs.tasks},
    )
    base_refs, new_refs = _baseline_rows(base_rows, base_runs.metas), _baseline_rows(new_rows, new_runs.metas)
    for case_id in result.in_both:
        b, n = base[case_id], new[case_id]
        result.changes += _compare_case(
            case_id, b, n, threshold, base_refs.get((b.source, case_id)), new_refs.get((n.source, case_id)), result.tasks
        )
    return result


def main_compare(args, find_task=None) -> int:
    """CLI handler: print the Markdown summary, optionally write it; 1 on a regression or a case
    of BASE missing from NEW, 2 on bad input (unreadable or empty runs, different suites/tasks,
    different GPU models without ``--allow-other-hardware``, different settings without
    ``--allow-different-settings``)."""
    allow = bool(getattr(args, "allow_other_hardware", False))
    try:
        result = compare_runs(
            args.base,
            args.new,
            threshold=args.threshold,
            allow_other_hardware=allow,
            find_task=find_task,
            allow_different_settings=bool(getattr(args, "allow_different_settings", False)),
        )
    except (RowsError, ValueError) as exc:
        print(f"posbench compare: {exc}", file=sys.stderr)
        return 2
    for line in result.hardware_warnings:
        if allow and line.startswith("GPU differs"):
            print(f"warning: {line} (--allow-other-hardware)", file=sys.stderr)
        elif line.startswith("settings differ"):
            print(f"warning: {line}", file=sys.stderr)
    text = result.markdown()
    print(text)
    if getattr(args, "markdown", None):
        atomic_write_text(args.markdown, text + "\n")
    return result.exit_code

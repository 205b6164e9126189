"""``bench.py compare BASE NEW``: per case and metric, NEW/BASE ratios against a threshold.

Loads both sides, refuses runs that cannot be compared (``posbench.report.compare_checks``:
different GPU models unless ``allow_other_hardware``, different settings unless
``allow_different_settings``), compares each case found in both
(``posbench.report.compare_cases``) and says the result in Markdown; a case of BASE that NEW
lacks is a failure when NEW ran its method. docs/reports.md (`bench.py compare`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace

import pandas as pd

from posbench.core.files import atomic_write_text
from posbench.core.task import Task
from posbench.report import numbers as fmt
from posbench.report import resolution
from posbench.report.compare_cases import MetricChange, compare_case, value_text
from posbench.report.compare_checks import (
    check_same_gpu,
    check_same_settings,
    hardware_warnings,
    settings_differences,
    suite_warnings,
)
from posbench.report.escape import md_code, md_text
from posbench.report.rows import load_runs
from posbench.store.bounds import RowsError
from posbench.store.run_rows import latest


@dataclass
class ComparisonResult:
    """What ``compare_runs`` found: every change, the cases of one side only, the warnings."""

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

    def _memory_note(self) -> str:
        """What memory changes are not claimed (``posbench.report.resolution``), where any was compared."""
        devices = sorted({c.device for c in self.changes if c.memory})
        if not devices:
            return ""
        rules = "; ".join(f"{resolution.described(d)} on {d or 'an unnamed device'}" for d in devices)
        return f" Memory: a difference under {rules} is within the measurement's resolution and is no change."

    def markdown(self) -> str:
        """A summary for a pull request or ``$GITHUB_STEP_SUMMARY``."""
        pct = f"{self.threshold:.0%}"
        lines = [
            "## posbench compare",
            "",
            f"Base: {md_code(self.base_dir)} (commit {md_text(', '.join(self.base_commits) or 'unknown')}); "
            f"new: {md_code(self.new_dir)} (commit {md_text(', '.join(self.new_commits) or 'unknown')}). "
            f"Threshold: {pct} either way." + self._memory_note(),
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
                    show = (lambda v: fmt.ratio(v, 3)) if c.basis else (lambda v: value_text(c.task, c.metric, v, self.tasks))
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
        result.changes += compare_case(
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

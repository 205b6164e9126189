"""How stored rows fall into tables: per task, per (suite, hardware), per grid point.

The helpers every table builder shares (``posbench.report.tabulate`` and the tasks' own report
sections): first-seen order, the suite's method order and baseline (``run.json``), the commits
of a table's rows, and which metrics a task's report tabulates (its ``METRICS`` declarations).
"""

from __future__ import annotations

import pandas as pd

from posbench.core.task import Declarations, declare
from posbench.report.rows import Runs
from posbench.store.meta import LEGACY_BASELINE, RunMeta


def ordered(values) -> list:
    """Unique values in first-seen order."""
    return list(dict.fromkeys(values))


def sort_key(value):
    """A grid value's place in a sorted axis: numbers first, by value, then words; mixing types
    (grid values are usually numbers) must not break sorting."""
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def is_number(value) -> bool:
    """An int or float that is not a bool: what a cell or a chart can show as a number."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def short_commit(commits) -> str:
    """The distinct commits of some rows, shortened, for a caption."""
    commits = ordered(c[:10] for c in commits if isinstance(c, str) and c)  # skips None/NaN
    return ", ".join(commits) if commits else "unknown commit"


def task_groups(frame: pd.DataFrame, task: str):
    """Rows of one task split per (suite, hardware): one set of tables per machine."""
    rows = frame[frame["task"] == task]
    for (suite, hardware), group in rows.groupby(["suite", "hardware"], sort=False, dropna=False):
        yield suite, hardware, group


def by_params(group: pd.DataFrame) -> dict[tuple, list]:
    """Rows (as named tuples) per grid point, e.g. one list per L_train, in stored order."""
    out: dict[tuple, list] = {}
    for row in group.itertuples(index=False):
        out.setdefault(tuple(sorted(row.params.items())), []).append(row)
    return out


def rest_of(params: dict, column: str) -> tuple:
    """Grid parameters other than the column one; rows that differ in these get their own table."""
    return tuple(sorted((k, v) for k, v in params.items() if k != column))


def method_order(present, meta: RunMeta | None) -> list[str]:
    """The suite's method order (run.json), then methods it does not list in the order read."""
    present = ordered(present)
    first = [m for m in (meta.methods if meta else []) if m in present]
    return first + [m for m in present if m not in first]


def baseline_for(meta: RunMeta | None, override: str | None) -> str | None:
    """An explicit ``--baseline`` wins; else the run.json's (None: no ratios); else the old default."""
    if override is not None:
        return override or None
    return meta.baseline if meta is not None else LEGACY_BASELINE


def declared_in(runs: Runs, task: str, frame: pd.DataFrame, names=()) -> Declarations:
    """The task's declarations of its own metrics, of ``names``, of the suites' and of those
    ``frame``'s rows hold, resolved in one call; a task this installation does not know declares none."""
    known = runs.tasks.get(task)
    found = [k for m in frame["metrics"] if isinstance(m, dict) for k in m]
    suites = [k for meta in runs.metas.values() if meta is not None for k in meta.metrics]
    return declare(known.METRICS if known is not None else {}, [*names, *suites, *found, "status"])


def choose_metrics(group: pd.DataFrame, declared: Declarations, meta: RunMeta | None) -> list[str]:
    """The metrics a report tabulates: the suite's (run.json) and those declared ``table=True``,
    in declaration order, less those the task shows elsewhere (``shown_in``: a column of another
    table; housekeeping: the run-details appendix). With none of these, every numeric metric the
    rows carry that the task does not show elsewhere (all of them for an undeclared task)."""
    own = declared.metrics
    suite = list(meta.metrics if meta else [])
    wanted = set(suite) | {k for k, m in own.items() if m.table}
    names = [k for k in own if k in wanted] + [k for k in suite if k not in own]
    names = [k for k in names if _own_table(declared, k)]
    if names:
        return ordered(names)
    found = ordered(k for m in group["metrics"] for k, v in m.items() if is_number(v))
    return [k for k in found if _own_table(declared, k) and declared.of[k].spread_of is None] if own else found


def _own_table(declared: Declarations, name: str) -> bool:
    said = declared.of[name]
    return not said.metric.shown_in and not (declared.metrics and said.housekeeping)


def family_head(name: str) -> str | None:
    """``ppl@*`` -> ``ppl``: the head of a family key, None for a plain metric name."""
    return name[:-2] if name.endswith("@*") else None

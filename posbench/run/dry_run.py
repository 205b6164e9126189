"""``bench.py run --dry-run``: the plan of a run, made as the run would make it, without running
or writing anything (``dry_run``). The CLI prints it.

A dry run takes no lock and reads the run folder as it is; with ``--fresh`` it reads none (the
new folder is named when the run starts), so every case is to run.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.run.options import RunOptions, default_run_id
from posbench.run.pool import slots_for
from posbench.run.schedule import RETRYABLE, Plan, plan_rounds
from posbench.run.suite import Suite
from posbench.store.run_rows import case_rows, read_usable_run_rows


@dataclass
class DryRun:
    """What a run would do: its suite (``--methods`` joined), run id, run folder (None with
    ``--fresh``: a new one), the cases with a round to run (schedule order, each once), the
    finished rows of the folder, one per case (its rounds merged), why each case runs (``why``:
    case id -> words) and the time it would take from the folder's recorded case times
    (``estimate_s``: None when no case to run has one; ``unknown``: cases to run without one)."""

    suite: Suite
    run_id: str
    run_dir: Path | None
    todo: list[CaseSpec]
    done: dict[str, dict]
    why: dict[str, str] = field(default_factory=dict)
    estimate_s: float | None = None
    unknown: int = 0

    def unavailable(self, case: CaseSpec) -> str | None:
        """Why ``case`` cannot run here, as the task knows it without a worker (None: it runs)."""
        task = self.suite.task
        return task.unavailable_reason(case) if task.unavailable is not None else None


def dry_run(suite: Suite, options: RunOptions) -> DryRun:
    """The plan of ``bench.py run`` with these options, read from the run folder as it is now."""
    slots_for(suite, options)  # --gpus / --parallel refused as the run refuses them
    run_id = options.run_id or default_run_id(suite, options.device)
    run_dir = None if options.fresh else Path(options.results) / suite.name / run_id
    plan = plan_rounds(suite, options, run_id, run_dir)
    todo = list({c.id: c for c, _r in plan.todo}.values())
    done = {} if run_dir is None else case_rows(read_usable_run_rows(run_dir))
    return DryRun(plan.suite, run_id, run_dir, todo, done, *reasons_and_time(plan))


def reasons_and_time(plan: Plan) -> tuple[dict[str, str], float | None, int]:
    """(case id -> why it runs, the seconds its (case, round)s would take, how many of them have no
    recorded time). Why, from a case's first (case, round) to run: ``failed, retried``
    (``--retry-failed``), ``measured again: a method joins its grid point``, ``resumed`` (some of
    its rounds are done), ``new, joining the run`` (a method the folder did not hold; ``alone,
    unpaired`` where it runs apart) or ``new``. The time, from the folder's recorded rows: the
    case's own time per round (their median), else its method's (a paired group's row holds its
    share of the group's time); None when no (case, round) to run has one."""
    took: dict[str, list[float]] = {}  # case id, and method -> recorded seconds per round
    for (cid, _r), row in plan.done.items():
        took.setdefault(cid, []).append(float(row.get("duration_s") or 0.0))
        took.setdefault(f"method {row.get('method')}", []).append(float(row.get("duration_s") or 0.0))
    why: dict[str, str] = {}
    seconds, unknown = 0.0, 0
    for case, rnd in plan.todo:
        known = [s for s in took.get(case.id) or took.get(f"method {case.method}") or [] if s > 0]
        seconds, unknown = (seconds + statistics.median(known), unknown) if known else (seconds, unknown + 1)
        row = plan.done.get((case.id, rnd))
        if case.id in why:
            continue
        if row is not None:
            why[case.id] = (
                "failed, retried" if row.get("status") in RETRYABLE else "measured again: a method joins its grid point"
            )
        elif case.id in took:  # some of its rounds are done
            why[case.id] = "resumed"
        elif plan.held and case.method not in plan.held:
            why[case.id] = "new, joining the run" + (", alone, unpaired" if (case.id, rnd) in plan.lone else "")
        else:
            why[case.id] = "new"
    return why, (seconds if unknown < len(plan.todo) else None), unknown

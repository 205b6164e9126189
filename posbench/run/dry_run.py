"""``bench.py run --dry-run``: the plan of a run, made as the run would make it, without running
or writing anything (``dry_run``). The CLI prints it.

A dry run takes no lock and reads the run folder as it is; with ``--fresh`` it reads none (the
new folder is named when the run starts), so every case is to run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.run.options import RunOptions, default_run_id
from posbench.run.pool import slots_for
from posbench.run.schedule import plan_rounds
from posbench.run.suite import Suite
from posbench.store.run_rows import case_rows, read_usable_run_rows


@dataclass
class DryRun:
    """What a run would do: its suite (``--methods`` joined), run id, run folder (None with
    ``--fresh``: a new one), the cases with a round to run (schedule order, each once), and the
    finished rows of the folder, one per case (its rounds merged)."""

    suite: Suite
    run_id: str
    run_dir: Path | None
    todo: list[CaseSpec]
    done: dict[str, dict]

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
    return DryRun(plan.suite, run_id, run_dir, todo, done)

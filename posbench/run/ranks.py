"""bench.py under torchrun: every rank runs the runner, and each case runs in-process on the ranks.

Rank 0 plans (``broadcast``), every rank runs each case (``run_on_ranks``), outcomes travel
through the rendezvous store (not collectives a failed rank may have left out of step), rank 0
alone writes rows; ranks that ended a case differently stop the run (``RanksOutOfStep``).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

from posbench.core.case import CaseSpec
from posbench.run.handoff import first_failure
from posbench.run.worker import rank_failure, run_case

T = TypeVar("T")


class RanksOutOfStep(Exception):
    """In-process distributed run: ranks ended a case differently (one failed alone), so their
    collectives may be out of step; the run stops after writing the case's row."""

    def __init__(self, run_dir: Path, row: dict):
        super().__init__(
            f"{row['case_id']}: {row['message']}: the ranks ended this case differently, so their "
            f"process group cannot be trusted; the run stops here (rows are in {run_dir}/cases.jsonl; "
            "re-run the same command to resume)"
        )
        self.run_dir, self.row = run_dir, row


def broadcast(obj: T, in_process: bool) -> T:
    """Rank 0's ``obj`` on every rank (pickled over the process group)."""
    if not in_process:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _store():
    """The rendezvous key-value store torchrun's process group was built on. Outcomes travel
    through it, not through collectives: a rank that failed mid-case leaves its peers' collective
    sequence out of step, and one more collective could pair the wrong operations."""
    import torch.distributed.distributed_c10d as c10d

    return c10d._get_default_store()


def run_on_ranks(case: CaseSpec, key: str) -> dict:
    """Run ``case`` on this rank with the launched process group; the case's merged outcome.

    No memory limit (it would stay on the whole run) and no wall-clock limit beyond the process
    group's timeout (``timeout_s`` of the suite): that is what a run under torchrun gives up.
    """
    from posbench.engine import distributed

    rank, world = distributed.rank(), distributed.world_size()
    result = run_case(case.to_json(), limit_memory=False)
    store = _store()
    brief = {k: result.get(k) for k in ("status", "message", "traceback", "failed_at")}
    store.set(f"{key}/rank{rank}", json.dumps(brief))
    keys = [f"{key}/rank{r}" for r in range(world)]
    # A rank that failed alone waits here while its peers sit out the process group's timeout
    # in a collective: wait longer than that, or it would time out in the same instant.
    store.wait(keys, timedelta(seconds=2 * case.settings["timeout_s"] + 60))
    outcomes = [json.loads(store.get(k)) for k in keys]
    failure = first_failure([dict(o, rank=r) for r, o in enumerate(outcomes)])
    if failure is None:
        return result
    # Ranks that all failed the same way left their collectives in step (rank 0 speaks for
    # them); anything else did not, and the first failure is the cause.
    alike = len({(o["status"], o["message"]) for o in outcomes}) == 1
    if alike:
        failure = dict(outcomes[0], rank=0)
    merged = rank_failure(dict(failure, metrics={}, series={}), failure["rank"])
    merged["out_of_step"] = not alike
    return merged

"""Runs one case in its own process: ``python -m posbench.run.worker CASE.json RESULT.json``.

RESULT.json (``{"status", "message", "traceback", "metrics", "series"}``, or ``{"group": [...]}``
for a paired-windows group) is written only when the task returned or raised, so a missing file
means the process died. Under torchrun every rank runs this module; rank 0 writes RESULT.json, a
failing rank ``RESULT.rank<N>.json`` (``read_result`` takes the earliest failure). Statuses:
``oom`` (allocation failures), ``diverged``, ``unavailable``, else ``error`` (docs/reliability.md).
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path

from posbench import tasks
from posbench.core.case import Case, CaseSpec, JsonDict
from posbench.core.outcome import failure, ok_result, one_line
from posbench.core.task import Task
from posbench.run.handoff import die_with_parent, rank_file


def apply_memory_limit(limit_mb: int | None) -> None:
    """Cap the address space (Linux RLIMIT_AS): allocations past it fail instead of swapping."""
    if limit_mb is None:
        return
    import resource

    limit = limit_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def prepare(case: Case) -> bool:
    """What every task needs before it runs, done once here rather than in each task: torch's
    CPU threads (``threads``), its subnormal flush (``flush_denormal``) and the method folders the
    suite names (``--methods-dir``). Returns whether subnormals are flushed now, for the rows."""
    threads, flush = case.settings.threads, case.settings.flush_denormal
    flushed = False
    if threads or flush or "torch" in sys.modules:
        import torch  # only then: the test-only task (flush_denormal false) runs without torch

        if threads:
            torch.set_num_threads(threads)
        # Subnormals cost some CPUs a microcode trap per operation (ALiBi 2.6x slower on an Intel
        # Xeon, issue 59), a cost of the CPU rather than of the method; attention on a GPU
        # flushes them. False where the CPU cannot flush (set_flush_denormal says so).
        flushed = torch.set_flush_denormal(flush) and flush
    if case.methods_dirs:
        from posbench.core import registry

        for folder in case.methods_dirs:
            registry.add_methods_dir(folder)
    return flushed


def import_user_method(task: Task, case: Case) -> None:
    """Import the user's method file(s) ``case`` needs (``--methods-dir``, ``POSBENCH_METHODS_PATH``)
    within the import limit before the task runs: a file that blocks at import fails this case in
    seconds, naming the limit, rather than holding the worker (in a group, every method's case)
    until the case's timeout. Built-in files are left to the task (the test-only task never asks
    for its method, so its workers never import torch); a task's own variants have no file."""
    if task.own_methods:
        return
    from posbench.core import registry

    composed = registry.split_composed(case.method)
    wanted = {registry.require(case.method)} | ({registry.require(composed[0])} if composed else set())
    for where in sorted(wanted):
        path = Path(where)
        if path.is_file() and registry.METHODS_DIR.resolve() not in path.resolve().parents:
            registry.import_method_file(path, registry.import_limit_s())


def import_failures(task: Task, cases: list[Case], limit_mb: int | None) -> dict[str, dict]:
    """case id -> its failure, for the cases of a group whose method file does not import in time."""
    out = {}
    for case in cases:
        try:
            import_user_method(task, case)
        except Exception as exc:
            out[case.id] = failure(exc, limit_mb)
    return out


def with_flush(result: dict, flushed: bool) -> dict:
    """``result`` with ``info.flush_denormal``: whether its case ran with subnormals flushed."""
    return dict(result, info={**result.get("info", {}), "flush_denormal": flushed})


def typed_case(task: Task, raw: JsonDict) -> Case:
    """The case of ``raw`` (a ``CaseSpec``'s JSON, from the runner) with the task's typed
    ``params`` and ``settings`` (``posbench.core.case``)."""
    spec = CaseSpec.from_json(raw)
    shared = {f.name: getattr(spec, f.name) for f in fields(spec) if f.name not in ("params", "settings")}
    from posbench.run.launch import run_worker

    return Case(
        **shared,
        params=task.Params.model_validate(spec.params),
        settings=task.Settings.model_validate(spec.settings),
        run_alone=run_worker,
    )


def run_group(raw: dict) -> dict:
    """Several cases of one grid point and round in this one process (module docstring):
    ``{"group": [result per case]}``. The memory limit is per case, so the group gets
    ``memory_limit_mb`` times the number of cases."""
    task = tasks.get(raw["group"][0]["task"])
    cases = [typed_case(task, c) for c in raw["group"]]
    limit = cases[0].settings.memory_limit_mb
    limit = limit * len(cases) if limit else None
    apply_memory_limit(limit)
    flushed, failed = False, {}
    try:
        flushed = prepare(cases[0])
        failed = import_failures(task, cases, limit)  # a method file that fails or blocks costs its own case
        todo = [c for c in cases if c.id not in failed]
        out = failed | (task.run_group(todo, raw.get("round", 1)) if todo else {})
    except Exception as exc:  # outside every method: the group's other cases failed the same way
        return {"group": [with_flush(failed.get(c.id) or failure(exc, limit), flushed) for c in cases]}
    missing = {
        "status": "error",
        "message": "the task returned no result for this case",
        "traceback": "",
        "metrics": {},
        "series": {},
    }
    return {"group": [with_flush(out.get(c.id, missing), flushed) for c in cases]}


def run_case(raw: dict, limit_memory: bool = True) -> dict:
    task = tasks.get(raw["task"])
    case = typed_case(task, raw)
    limit = case.settings.memory_limit_mb if limit_memory else None
    apply_memory_limit(limit)
    flushed = False
    try:
        flushed = prepare(case)
        import_user_method(task, case)
        return with_flush(ok_result(task.run(case)), flushed)
    except Exception as exc:  # every failure becomes a row; the suite goes on
        return with_flush(failure(exc, limit), flushed)


def rank_failure(result: dict, rank: int) -> dict:
    """A failed rank's result, its message naming the rank."""
    return dict(result, message=f"rank {rank}: {result['message']}", rank=rank)


def write_json(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, allow_nan=True))
    os.replace(tmp, path)  # a reader sees the whole file or none


def main_distributed(raw: dict, result_path: Path) -> int:
    """One rank of a torchrun launch (see the module docstring)."""
    from posbench.engine import distributed

    rank = int(os.environ.get("RANK", "0"))
    try:
        distributed.init_from_env(raw["device"], timeout_s=raw["settings"].get("timeout_s"))
    except Exception as exc:
        result = {"status": "error", "message": one_line(exc), "traceback": traceback.format_exc(), "failed_at": time.time()}
    else:
        result = run_case(raw)
    if result["status"] != "ok":
        write_json(rank_file(result_path, rank), rank_failure(result, rank))
        return 1
    if rank == 0:
        write_json(result_path, result)
    distributed.teardown()
    return 0


def main(argv: list[str]) -> int:
    arm = die_with_parent(os.getppid())  # torchrun's ranks too: they die with torchrun
    if arm is not None:
        arm()
    case_path, result_path = Path(argv[0]), Path(argv[1])
    raw = json.loads(case_path.read_text())
    if "group" in raw:
        write_json(result_path, run_group(raw))
        return 0
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return main_distributed(raw, result_path)
    write_json(result_path, run_case(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

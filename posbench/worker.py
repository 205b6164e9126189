"""Runs one case in its own process: ``python -m posbench.worker CASE.json RESULT.json``.

The runner starts one worker per case, so a crash, a hang or an out-of-memory costs one row and
peak memory is about this case alone. The result file is written only when the task returned or
raised (to a temporary name, then renamed), so a missing file means the process died: the runner
turns that into an ``error`` row with the exit code or signal.

Under torchrun (``nproc`` > 1: the runner starts ``python -m torch.distributed.run ... -m
posbench.worker``) every rank runs this module: it joins the process group from the environment
and runs the case. Rank 0 alone writes RESULT.json when it succeeds; a rank that fails writes
``RESULT.rank<N>.json`` (message ``rank N: ExcType: msg``, and when it failed) and exits with
status 1, so torchrun stops the other ranks, which may be waiting for it in a collective. The
runner reads them back with ``read_result``: any rank's failure makes the row, the earliest one
if several ranks failed (the first is the cause, the others its echo).

Result: ``{"status", "message", "traceback", "metrics", "series"}``. Status ``oom`` for
``MemoryError``, ``torch.cuda.OutOfMemoryError`` and torch's CPU allocator failing (what an
``RLIMIT_AS`` limit produces); ``diverged`` for ``tasks.Diverged``; ``unavailable`` for ``tasks.Unavailable`` (the message is the
reason); ``error`` for anything else.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path

from . import tasks
from .case import Case


def apply_memory_limit(limit_mb: int | None) -> None:
    """Cap the address space (Linux RLIMIT_AS): allocations past it fail instead of swapping."""
    if limit_mb is None:
        return
    import resource

    limit = limit_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def classify(exc: BaseException) -> str:
    if isinstance(exc, tasks.Diverged):
        return "diverged"
    if isinstance(exc, tasks.Unavailable):
        return "unavailable"
    if isinstance(exc, MemoryError):
        return "oom"
    torch = sys.modules.get("torch")  # only a task that imported torch can raise its errors
    if torch is not None:
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            return "oom"
        if isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc):
            return "oom"
    return "error"


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def run_case(raw: dict, limit_memory: bool = True) -> dict:
    task = tasks.get(raw["task"])
    case = Case(**raw)
    case.settings = task.Settings.model_validate(raw["settings"])
    case.params = task.Params.model_validate(raw["params"])
    if limit_memory:
        apply_memory_limit(case.settings.memory_limit_mb)
    try:
        out = task.run(case)
        return {"status": "ok", "message": "", "traceback": "", "metrics": out.get("metrics", {}),
                "series": out.get("series", {})}
    except Exception as exc:  # every failure becomes a row; the suite goes on
        status = classify(exc)
        message = str(exc) if status == "unavailable" else one_line(exc)  # the reason, as the runner gives it
        return {"status": status, "message": message, "traceback": traceback.format_exc(),
                "metrics": {}, "series": {}, "failed_at": time.time()}


def rank_failure(result: dict, rank: int) -> dict:
    """A failed rank's result, its message naming the rank."""
    return dict(result, message=f"rank {rank}: {result['message']}", rank=rank)


def first_failure(results: list[dict]) -> dict | None:
    """The failure that came first: when one rank fails, its peers fail next, waiting for it."""
    failed = [r for r in results if r.get("status", "error") != "ok"]
    return min(failed, key=lambda r: r.get("failed_at", float("inf"))) if failed else None


def rank_file(result_path: Path, rank: int | str) -> Path:
    return result_path.with_name(f"{result_path.stem}.rank{rank}{result_path.suffix}")


def read_result(result_path: Path) -> dict | None:
    """The case's outcome: a rank's failure if any rank wrote one, else RESULT.json, else None."""
    failures = [json.loads(p.read_text()) for p in result_path.parent.glob(rank_file(result_path, "*").name)]
    failure = first_failure(failures)
    if failure is not None:
        return failure
    return json.loads(result_path.read_text()) if result_path.exists() else None


def write_json(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, allow_nan=True))
    os.replace(tmp, path)  # a reader sees the whole file or none


def main_distributed(raw: dict, result_path: Path) -> int:
    """One rank of a torchrun launch (see the module docstring)."""
    from . import distributed

    rank = int(os.environ.get("RANK", "0"))
    try:
        distributed.init_from_env(raw["device"], timeout_s=raw["settings"].get("timeout_s"))
    except Exception as exc:
        result = {"status": "error", "message": one_line(exc), "traceback": traceback.format_exc(),
                  "failed_at": time.time()}
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
    case_path, result_path = Path(argv[0]), Path(argv[1])
    raw = json.loads(case_path.read_text())
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return main_distributed(raw, result_path)
    write_json(result_path, run_case(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

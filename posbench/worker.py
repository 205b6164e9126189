"""Runs one case in its own process: ``python -m posbench.worker CASE.json RESULT.json``.

The runner starts one worker per case, so a crash, a hang or an out-of-memory costs one row and
peak memory is about this case alone. The result file is written only when the task returned or
raised (to a temporary name, then renamed), so a missing file means the process died: the runner
turns that into an ``error`` row with the exit code or signal.

Result: ``{"status", "message", "traceback", "metrics", "series"}``. Status ``oom`` for
``MemoryError``, ``torch.cuda.OutOfMemoryError`` and torch's CPU allocator failing (what an
``RLIMIT_AS`` limit produces); ``diverged`` for ``tasks.Diverged``; ``error`` for anything else.
"""
from __future__ import annotations

import json
import os
import sys
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


def run_case(raw: dict) -> dict:
    task = tasks.get(raw["task"])
    case = Case(**raw)
    case.settings = task.Settings.model_validate(raw["settings"])
    case.params = task.Params.model_validate(raw["params"])
    apply_memory_limit(case.settings.memory_limit_mb)
    try:
        out = task.run(case)
        return {"status": "ok", "message": "", "traceback": "", "metrics": out.get("metrics", {}),
                "series": out.get("series", {})}
    except Exception as exc:  # every failure becomes a row; the suite goes on
        return {"status": classify(exc), "message": one_line(exc), "traceback": traceback.format_exc(),
                "metrics": {}, "series": {}}


def main(argv: list[str]) -> int:
    case_path, result_path = Path(argv[0]), Path(argv[1])
    result = run_case(json.loads(case_path.read_text()))
    tmp = result_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, allow_nan=True))
    os.replace(tmp, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

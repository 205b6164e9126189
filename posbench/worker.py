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

Groups (``pairing: windows``): the runner may hand one worker several cases of one grid point and
round, ``{"group": [CASE, ...], "round": r}``; the task's ``run_group`` measures them together
(``posbench.paired``) and RESULT.json is ``{"group": [RESULT, ...]}``, one per case in order. A
method that fails inside the group has its own failure result; only a failure outside every
method (or the process dying) fails the whole group.

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


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int | None = None):
    """A function that makes the process calling it get SIGKILL when its parent dies (Linux
    ``prctl(PR_SET_PDEATHSIG)``), and exit at once if the parent (pid ``parent``) is already gone;
    None off Linux. The runner passes it as Popen's ``preexec_fn`` (it runs in the child between
    fork and exec, and the setting survives exec); a rank under torchrun calls it at start. The
    libc lookup happens here, in the caller, so the forked child only makes the call."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal

    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def arm() -> None:
        prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if parent is not None and os.getppid() != parent:  # it died before the line above
            os._exit(1)

    return arm


def apply_memory_limit(limit_mb: int | None) -> None:
    """Cap the address space (Linux RLIMIT_AS): allocations past it fail instead of swapping."""
    if limit_mb is None:
        return
    import resource

    limit = limit_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


# What an allocation failure looks like when it surfaces as another error: the dynamic loader
# mapping a library (import torch under a small RLIMIT_AS), torch's CPU allocator, C++ bad_alloc.
OOM_TEXT = ("can't allocate memory", "cannot allocate memory", "failed to map segment", "bad_alloc",
            "out of memory")


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from or while handling (a method file's import
    error wraps the MemoryError that caused it)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def memory_cause(exc: BaseException) -> BaseException | None:
    """The allocation failure behind ``exc``, anywhere in its chain, or None."""
    torch = sys.modules.get("torch")  # only a task that imported torch can raise its errors
    for e in _chain(exc):
        if isinstance(e, MemoryError):
            return e
        if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
            return e
        if isinstance(e, OSError) and e.errno == 12:  # ENOMEM
            return e
        if isinstance(e, (RuntimeError, ImportError, OSError)) and any(t in str(e).lower() for t in OOM_TEXT):
            return e
    return None


def classify(exc: BaseException) -> str:
    if isinstance(exc, tasks.Diverged):
        return "diverged"
    if isinstance(exc, tasks.Unavailable):
        return "unavailable"
    if memory_cause(exc) is not None:
        return "oom"
    return "error"


def failure(exc: BaseException, limit_mb: int | None = None) -> dict:
    """The result of a case that raised ``exc``. An allocation failure is ``oom`` wherever it
    happened, and under a memory limit its message names the limit rather than the file that
    happened to be loading (an import that ran out of memory is not that file's fault)."""
    status = classify(exc)
    message = str(exc) if status == "unavailable" else one_line(exc)  # the reason, as the runner gives it
    if status == "oom" and limit_mb is not None:
        message = (f"out of memory under memory_limit_mb {limit_mb} ({one_line(memory_cause(exc))}); "
                   "allowed: a larger memory_limit_mb, or none")
    return {"status": status, "message": message, "traceback": traceback.format_exc(),
            "metrics": {}, "series": {}, "failed_at": time.time()}


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def prepare(case: Case) -> None:
    """What every task needs before it runs, done once here rather than in each task: torch's
    CPU threads (``threads``) and the method folders the suite names (``--methods-dir``)."""
    threads = getattr(case.settings, "threads", None)
    if threads:
        import torch  # only then: the test-only task runs without torch

        torch.set_num_threads(threads)
    if case.methods_dirs:
        from . import registry

        for folder in case.methods_dirs:
            registry.add_methods_dir(folder)


def typed_case(task, raw: dict) -> Case:
    """The case of ``raw`` (runner JSON) with the task's typed ``settings`` and ``params``."""
    case = Case(**raw)
    case.settings = task.Settings.model_validate(raw["settings"])
    case.params = task.Params.model_validate(raw["params"])
    return case


def ok_result(out: dict) -> dict:
    """A task's return value as an ``ok`` result."""
    return {"status": "ok", "message": "", "traceback": "", "metrics": out.get("metrics", {}),
            "series": out.get("series", {}), "info": out.get("info", {})}


def run_group(raw: dict) -> dict:
    """Several cases of one grid point and round in this one process (module docstring):
    ``{"group": [result per case]}``. The memory limit is per case, so the group gets
    ``memory_limit_mb`` times the number of cases."""
    task = tasks.get(raw["group"][0]["task"])
    cases = [typed_case(task, c) for c in raw["group"]]
    limit = cases[0].settings.memory_limit_mb
    limit = limit * len(cases) if limit else None
    apply_memory_limit(limit)
    try:
        prepare(cases[0])
        out = task.run_group(cases, raw.get("round", 1))
    except Exception as exc:  # outside every method: the whole group failed the same way
        return {"group": [failure(exc, limit)] * len(cases)}
    missing = {"status": "error", "message": "the task returned no result for this case", "traceback": "",
               "metrics": {}, "series": {}}
    return {"group": [out.get(c.id, missing) for c in cases]}


def run_case(raw: dict, limit_memory: bool = True) -> dict:
    task = tasks.get(raw["task"])
    case = typed_case(task, raw)
    limit = case.settings.memory_limit_mb if limit_memory else None
    apply_memory_limit(limit)
    try:
        prepare(case)
        return ok_result(task.run(case))
    except Exception as exc:  # every failure becomes a row; the suite goes on
        return failure(exc, limit)


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

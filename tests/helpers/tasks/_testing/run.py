"""What a ``_testing`` case does: its ``behaviour``.

``fail_rank``: that rank of a distributed case raises while the others wait in a barrier. With
``pairing: windows`` a raising case fails alone in ``run_group``; ``crash``/``kill``/
``interrupt_once`` end the whole process, as a real group's crash would.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from posbench.core.task import Diverged


def _log_run(word: str, case) -> None:
    """``POSBENCH_TESTING_RUN_LOG``: a line per case started and ended, appended (kill-loop tests
    count from it how often each case ran)."""
    path = os.environ.get("POSBENCH_TESTING_RUN_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(f"{word} {case.id} {os.getpid()}\n")


def run(case) -> dict:
    _log_run("start", case)
    try:
        return _run(case)
    finally:
        _log_run("end", case)


def _run(case) -> dict:
    s = case.settings
    what = s.by_method.get(case.id, s.by_method.get(case.method, s.behaviour))
    rank = int(os.environ.get("RANK", "0"))
    if what == "fail_rank":
        if rank == s.fail_rank:
            raise ValueError(f"boom on rank {rank}")
        import torch.distributed as dist  # only distributed cases get here: torch is loaded

        if dist.is_initialized():
            dist.barrier()  # never completes: torchrun must end this rank
    if what == "load":
        from posbench.core import registry

        registry.get(case.method)
    elif what == "sleep":
        time.sleep(s.sleep_s)
    elif what == "raise":
        raise ValueError(f"boom in {case.method}\nsecond line")
    elif what == "crash":
        os._exit(3)
    elif what == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif what == "oom":
        raise MemoryError("pretend allocation failure")
    elif what == "alloc":
        bytearray(s.alloc_mb * 2**20)  # fails under RLIMIT_AS below alloc_mb
    elif what == "nan":
        raise Diverged("non-finite training loss (nan) in window 0")
    elif what == "interrupt_once":
        flag = Path(s.flag_file)
        if not flag.exists():
            flag.write_text("interrupted")
            os.kill(os.getppid(), signal.SIGINT)  # what Ctrl-C does to the runner
            time.sleep(30)  # the runner kills us long before this ends
    return {
        "metrics": {"value": case.params.n * 1000, "pid": os.getpid(), "world_size": int(os.environ.get("WORLD_SIZE", "1"))},
        "series": {"steps": [1, 2, 3]},
    }


def run_group(cases, round_: int) -> dict:
    """Every case in this one process, in order; a case that raises gets its own failure."""
    from posbench.core.outcome import ok_result
    from posbench.engine.timing_windows import Member

    out = {}
    for case in cases:
        member = Member(case.id)
        result = member.guard(run, case)
        if member.ok:
            result["info"] = {"pairing": "windows", "group_size": str(len(cases)), "round": str(round_)}
        out[case.id] = ok_result(result) if member.ok else member.failure
    return out

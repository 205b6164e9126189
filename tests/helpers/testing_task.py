"""The test-only task ``_testing`` (registered by tests/conftest.py): each case does what its
``behaviour`` says, without importing torch, so the runner's tests produce every status (ok,
error, crash, timeout, oom, diverged, interrupt) in a worker that starts in a fraction of a second.

``fail_rank``: that rank of a distributed case raises while the others wait in a barrier. With
``pairing: windows`` a raising case fails alone in ``run_group``; ``crash``/``kill``/
``interrupt_once`` end the whole process, as a real group's crash would.
"""
from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.task import Diverged, Metric, Task, TaskSettings

Behaviour = Literal["ok", "sleep", "raise", "crash", "kill", "oom", "alloc", "nan", "interrupt_once", "fail_rank"]

METRICS = {"value": Metric(title="Value", unit="", doc="the grid point's n times 1000", higher_is_better=True),
           "pid": Metric(title="Worker pid", unit="", doc="the worker's process id", higher_is_better=None, fmt="int"),
           "world_size": Metric(title="Ranks", unit="", doc="ranks the case ran on (WORLD_SIZE)", higher_is_better=None, fmt="int")}


class Settings(TaskSettings):
    behaviour: Behaviour = "ok"
    by_method: dict[str, Behaviour] = Field(
        default_factory=dict, description="behaviour per case id (alibi/n=2) or per method (alibi)"
    )
    sleep_s: float = 5.0
    alloc_mb: int = 1024  # what "alloc" tries to allocate (under memory_limit_mb)
    flag_file: str = ""  # "interrupt_once": interrupt the runner only while this file is absent
    fail_rank: int = 1  # behaviour "fail_rank": this rank raises, the others wait in a barrier
    rounds: int = Field(1, ge=1, description="interleaved rounds (as the efficiency task's)")
    pairing: Literal["rounds", "windows"] = Field("rounds", description="as the efficiency task's")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    n: int = 1


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
    if what == "sleep":
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
    return {"metrics": {"value": case.params.n * 1000, "pid": os.getpid(),
                        "world_size": int(os.environ.get("WORLD_SIZE", "1"))}, "series": {"steps": [1, 2, 3]}}


def run_group(cases, round_: int) -> dict:
    """Every case in this one process, in order; a case that raises gets its own failure."""
    from posbench.engine.windows import Member
    from posbench.core.outcome import ok_result

    out = {}
    for case in cases:
        member = Member(case.id)
        result = member.guard(run, case)
        if member.ok:
            result["info"] = {"pairing": "windows", "group_size": str(len(cases)), "round": str(round_)}
        out[case.id] = ok_result(result) if member.ok else member.failure
    return out


TASK = Task(Settings, Params, METRICS, run, run_group=run_group)

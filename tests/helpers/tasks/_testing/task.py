"""``_testing``'s settings, grid point and metrics, and its registration."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from posbench.core.registry import register_task
from posbench.core.task import Metric, Task, TaskSettings

from .run import run, run_group

# "load": look the case's method up in the registry (importing its file), as a real task's model does
Behaviour = Literal["ok", "sleep", "raise", "crash", "kill", "oom", "alloc", "nan", "interrupt_once", "fail_rank", "load"]

METRICS = {
    "value": Metric(title="Value", unit="", doc="the grid point's n times 1000", higher_is_better=True),
    "pid": Metric(title="Worker pid", unit="", doc="the worker's process id", higher_is_better=None, fmt="int"),
    "world_size": Metric(title="Ranks", unit="", doc="ranks the case ran on (WORLD_SIZE)", higher_is_better=None, fmt="int"),
}


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
    # It computes nothing in floats: off by default, its workers never import torch (a second each).
    flush_denormal: bool = False


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    n: int = 1


TASK = register_task(Task(Settings, Params, METRICS, run, run_group=run_group, name="_testing"))

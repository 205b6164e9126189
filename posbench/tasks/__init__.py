"""Task registry: what a suite's ``task:`` key names, and the contract every task module meets.

A task module (``posbench/tasks/<name>.py``) defines:

- ``Settings``: a pydantic model subclassing ``TaskSettings`` (so it inherits the runner's own
  settings: timeout, memory limit, threads, seed). Suite ``settings`` merged with the profile's
  override are validated against it; unknown keys are rejected.
- ``Params``: a pydantic model of one grid point (e.g. ``seq_len``); a suite's grid axes must be
  its fields, and every grid value is validated against the field.
- ``METRICS``: ``{metric name: "unit, what it is"}``; a suite's ``metrics`` (the ones its table and
  progress lines show) must be keys of it.
- ``run(case: Case) -> {"metrics": {name: number | None}, "series": {name: list | dict}}``. It
  runs in a worker process (``posbench.worker``), one case per process; with ``nproc`` > 1 (or
  under torchrun) on every rank at once, with the process group already joined
  (``posbench.distributed``), and rank 0's return value is the result. Raise ``Diverged`` for a
  non-finite loss; ``MemoryError`` / ``torch.cuda.OutOfMemoryError`` become status ``oom``.

Modules are imported lazily, so a worker imports only its own task (the test task does not
import torch, which keeps the runner's tests fast). Names starting with ``_`` are test-only and
hidden from listings.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Optional

from pydantic import BaseModel, ConfigDict, Field

TASKS: dict[str, str] = {
    "efficiency": "posbench.tasks.efficiency",
    "extrapolation": "posbench.tasks.extrapolation",
    "precision": "posbench.tasks.precision",
    "kernels": "posbench.tasks.kernels",
    "retrieval": "posbench.tasks.retrieval",
    "_testing": "posbench.tasks._testing",
}


class Diverged(Exception):
    """The loss became non-finite; the row gets status ``diverged``."""


class TaskSettings(BaseModel):
    """Settings every task accepts; they steer the runner and the worker rather than the task."""

    model_config = ConfigDict(extra="forbid", strict=True)

    timeout_s: float = Field(600.0, gt=0, description="wall-clock limit of one case's worker process (s)")
    memory_limit_mb: Optional[int] = Field(
        None, ge=1, description="RLIMIT_AS of the worker (virtual address space, MiB; Linux only)"
    )
    threads: Optional[int] = Field(None, ge=1, description="torch CPU threads (OMP_NUM_THREADS); default: torch's")
    seed: int = Field(0, description="seed of weights and token ids")
    nproc: int = Field(1, ge=1, description="data-parallel processes per case: the runner launches the case "
                       "through torchrun (one rank per GPU on CUDA); 1: one plain worker process")


def register_task(name: str, module: str) -> None:
    """Make ``task: name`` resolve to the importable module ``module``."""
    if name in TASKS and TASKS[name] != module:
        raise ValueError(f"duplicate task name {name!r}: {TASKS[name]} and {module}")
    TASKS[name] = module


def names(include_hidden: bool = False) -> list[str]:
    return sorted(n for n in TASKS if include_hidden or not n.startswith("_"))


def get(name: str) -> ModuleType:
    """The task module; an unknown name raises ``KeyError`` with the known ones."""
    if name not in TASKS:
        raise KeyError(name)
    return importlib.import_module(TASKS[name])

"""The tasks, one package each (``efficiency/``, ``extrapolation/``, ...), and their registry.

A task package owns its helpers and report section and declares ``TASK`` (the contract:
``posbench.core.task``); ``training`` holds what the tasks that train on a corpus share. A task is
imported only when asked for by name, so a worker imports its own task alone; names starting with
``_`` are test-only and hidden from listings.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import replace
from typing import Optional

from posbench.core.task import Metric, Task

TASKS: dict[str, str] = {
    "efficiency": "posbench.tasks.efficiency",
    "extrapolation": "posbench.tasks.extrapolation",
    "precision": "posbench.tasks.precision",
    "kernels": "posbench.tasks.kernels",
    "decode": "posbench.tasks.decode",
    "retrieval": "posbench.tasks.retrieval",
    "lengthgen": "posbench.tasks.lengthgen",
    "extension": "posbench.tasks.extension",
}
# Tasks registered in a parent process (``register_task``), as name=module,name=module: the
# workers it starts inherit the variable, so they find those tasks too.
TASKS_ENV = "POSBENCH_TASKS"


def _registered_in_env() -> dict[str, str]:
    pairs = (item.partition("=") for item in os.environ.get(TASKS_ENV, "").split(",") if item)
    return {name: module for name, _, module in pairs}


for _name, _module in _registered_in_env().items():
    TASKS.setdefault(_name, _module)  # a built-in name keeps its task


def register_task(name: str, module: str) -> None:
    """Make ``task: name`` resolve to the module ``module`` (which declares ``TASK``), here and in
    the worker processes started from here."""
    if name in TASKS and TASKS[name] != module:
        raise ValueError(f"duplicate task name {name!r}: {TASKS[name]} and {module}")
    TASKS[name] = module
    inherited = {**_registered_in_env(), name: module}
    os.environ[TASKS_ENV] = ",".join(f"{n}={m}" for n, m in inherited.items())


def names(include_hidden: bool = False) -> list[str]:
    return sorted(n for n in TASKS if include_hidden or not n.startswith("_"))


def find(name: str) -> Optional[Task]:
    """``get(name)``, or None for a task this installation does not know (rows of another one's)."""
    try:
        return get(name)
    except KeyError:
        return None


def get(name: str) -> Task:
    """The task registered as ``name``; an unknown name raises ``KeyError``, a module that breaks
    the contract a one-line ``TypeError``."""
    if name not in TASKS:
        raise KeyError(name)
    module = importlib.import_module(TASKS[name])
    task = vars(module).get("TASK")
    if not isinstance(task, Task):
        raise TypeError(f"task {name!r} ({TASKS[name]}) lacks TASK; a task module defines "
                        "TASK = posbench.core.task.Task(Settings, Params, METRICS, run, ...)")
    bad = next((k for k, v in task.METRICS.items() if not isinstance(v, Metric)), None)
    if bad is not None:
        raise TypeError(f"task {name!r}: METRICS[{bad!r}] is not a posbench.core.task.Metric")
    return replace(task, name=name, module=module)


def metrics_of(name: str) -> dict[str, Metric]:
    """The ``METRICS`` of task ``name``; an empty dict for a task this installation does not know."""
    task = find(name)
    return task.METRICS if task is not None else {}

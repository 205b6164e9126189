"""The tasks, one package each (``efficiency/``, ``extrapolation/``, ...), and the front the rest of
posbench asks them through.

A task package declares its ``TASK`` in its task.py with ``register_task``
(docs/tasks/contract.md). Each package is a leaf: no task package imports another, and what
several share (training on a corpus, seeds, train then evaluate, the probes, ...) lives one floor
beneath them, in ``posbench.protocols``; this folder holds only the packages and this front. Finding
task packages (here, in ``POSBENCH_TASKS_PATH`` folders, from ``posbench.tasks`` entry points) is
``posbench.core.registry``'s: listing names imports no task, asking for one imports its package
alone, so a worker imports its own task only. Names starting with ``_`` are test-only and hidden
from listings.
"""

from __future__ import annotations

from posbench.core import registry
from posbench.core.task import Metric, Task


def names(include_hidden: bool = False) -> list[str]:
    return registry.task_names(include_hidden)


def get(name: str) -> Task:
    """The task registered as ``name``; an unknown name raises ``KeyError``, a package that breaks
    the contract a one-line ``RegistryError`` naming it."""
    return registry.get_task(name)


def find(name: str) -> Task | None:
    """``get(name)``, or None for a task this installation does not know (rows of another one's)."""
    return registry.find_task(name)


def metrics_of(name: str) -> dict[str, Metric]:
    """The ``METRICS`` of task ``name``; an empty dict for a task this installation does not know."""
    task = find(name)
    return task.METRICS if task is not None else {}

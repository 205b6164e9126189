"""The tasks: one package per task (``efficiency/``, ``extrapolation/``, ...), each owning its
helpers and its report section. The contract they meet and the registry of their names live in
``posbench.core.task``; it imports a task's package only when a suite names it."""
from posbench.core.task import (  # noqa: F401  (re-exported: the names plugins and older code use)
    TASKS, LoadedTask, Metric, Task, TaskSettings, find_metric, get, metrics_of, names, register_task,
)

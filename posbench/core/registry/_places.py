"""Where methods and tasks are found: the built-in folders, the path variables and the entry-point
groups, read afresh at each call (workers inherit the variables; installed packages do not change)."""

from __future__ import annotations

import functools
import importlib.metadata
import os
from pathlib import Path

from posbench.core.builtin import builtin_dir

METHODS_DIR = builtin_dir("methods")  # the checkout's methods/, or posbench/methods/ in a wheel
METHODS_ENV_PATH = "POSBENCH_METHODS_PATH"
METHODS_ENTRY_POINTS = "posbench.methods"
TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"  # posbench/tasks/, in a checkout and in a wheel
TASKS_ENV_PATH = "POSBENCH_TASKS_PATH"
TASKS_ENTRY_POINTS = "posbench.tasks"


def env_folders(variable: str) -> list[Path]:
    """The folders of an ``os.pathsep``-separated variable (workers inherit it)."""
    return [Path(entry.strip()) for entry in os.environ.get(variable, "").split(os.pathsep) if entry.strip()]


@functools.cache
def entry_points(group: str) -> tuple:
    """The entry points of ``group`` (installed packages do not change in a run)."""
    return tuple(importlib.metadata.entry_points(group=group))

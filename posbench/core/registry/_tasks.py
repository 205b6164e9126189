"""Finding task packages and looking tasks up by name.

A task package is a folder holding an __init__.py and a task.py, whose ``register_task`` call
declares the task under the folder's name: the packages of ``posbench/tasks/``, of the folders of
``POSBENCH_TASKS_PATH``, and the ``posbench.tasks`` entry points. Listing reads folders and imports
nothing; asking for one task imports only its package. A package is code that runs: it is imported
within the method files' limit (``import_limit_s``), and one that fails is one line naming it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core.registry import _imports, _places, _tables
from posbench.core.registry._tables import RegistryError

if TYPE_CHECKING:
    from posbench.core.task import Task

_CUT: dict[str, str] = {}  # package -> the line of its import cut at the limit: not waited for again


def _is_task_package(folder: Path) -> bool:
    return (folder / "__init__.py").is_file() and (folder / "task.py").is_file()


def _task_packages() -> dict[str, str]:
    """name -> where (a package folder, or an entry point) of every task found; a name found twice
    is an error naming both places."""
    found: dict[str, str] = {}

    def add(name: str, where: str) -> None:
        if found.get(name, where) != where:
            raise RegistryError(f"duplicate task name {name!r}: found in {found[name]} and in {where}")
        found[name] = where

    for folder in [_places.TASKS_DIR] + _places.env_folders(_places.TASKS_ENV_PATH):
        if not folder.is_dir():
            raise RegistryError(f"tasks folder {folder} ({_places.TASKS_ENV_PATH}) does not exist or is not a folder")
        for package in sorted(folder.iterdir()):
            if package.is_dir() and _is_task_package(package):
                add(package.name, str(package.resolve()))
    for ep in _places.entry_points(_places.TASKS_ENTRY_POINTS):
        add(ep.name, f"entry point {ep.name} = {ep.value}")
    return found


def task_names(include_hidden: bool = False) -> list[str]:
    """Every task's name, sorted, without importing one; names starting with ``_`` (test-only) only
    with ``include_hidden``."""
    found = set(_task_packages()) | set(_tables._TASKS)
    return sorted(n for n in found if include_hidden or not n.startswith("_"))


def _package_module(name: str, where: str) -> str:
    """The one module name a task package is imported under, so it is never imported twice."""
    if where.startswith("entry point "):
        return next(ep for ep in _places.entry_points(_places.TASKS_ENTRY_POINTS) if ep.name == name).module
    if Path(where).parent == _places.TASKS_DIR:
        return f"posbench.tasks.{name}"
    return f"posbench_tasks_{name}_{hashlib.sha1(where.encode()).hexdigest()[:8]}"


def _import_package(module_name: str, where: str) -> None:
    """Import a task package and its task.py. A package of a ``POSBENCH_TASKS_PATH`` folder is loaded
    from the folder, so its own modules import each other relatively (``from .run import run``)."""
    if where.startswith("entry point "):
        importlib.import_module(module_name)
        return
    folder = Path(where)
    if module_name.startswith("posbench_tasks_") and module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, folder / "__init__.py", submodule_search_locations=[where])
        sys.modules[module_name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[module_name])
    importlib.import_module(f"{module_name}.task")


def _import_task(name: str, where: str) -> None:
    """Import what ``where`` holds within ``import_limit_s``, which must register the task ``name``;
    else one line naming it. A package that fails leaves no module and no task behind, so asking
    again says why again (one cut at the limit at once, without waiting again)."""
    if where in _CUT:
        raise RegistryError(_CUT[where])
    before = dict(_tables._TASKS)
    module_name = _package_module(name, where)
    limit_s = _imports.import_limit_s()
    import posbench.core.task  # noqa: F401  (pydantic: its import is not the package's to pay for)

    try:
        with _imports.time_limit(limit_s):
            _import_package(module_name, where)
    except (Exception, _imports.ImportTimedOut) as exc:
        if isinstance(exc, _imports.ImportTimedOut):
            exc = _imports.timed_out("a task package", limit_s)
        detail = str(exc) if isinstance(exc, RegistryError) else f"{type(exc).__name__}: {exc}"
        problem, cause = f"error importing task package {where}: {detail}", exc
        if isinstance(exc, TimeoutError):
            _CUT[where] = problem
    else:
        if name in _tables._TASKS:
            return
        added = [n for n in _tables._TASKS if n not in before]
        if added:
            problem = (
                f"task {name!r} ({where}) registers {added[0]!r}; allowed: "
                f"register_task(Task(..., name={name!r})), the name of its package"
            )
        else:
            problem = (
                f"task {name!r} ({where}) registers no task; a task package's task.py declares "
                f"TASK = register_task(Task(Settings, Params, METRICS, run, ..., name={name!r}))"
            )
        cause = None
    for module in [m for m in sys.modules if m == module_name or m.startswith(module_name + ".")]:
        del sys.modules[module]
    _tables._TASKS.clear()
    _tables._TASKS.update(before)
    raise RegistryError(problem) from cause


def get_task(name: str) -> Task:
    """The task registered as ``name``, importing only its package; an unknown name raises
    ``KeyError``, a package that does not register it one ``RegistryError`` line naming it."""
    if name not in _tables._TASKS:
        where = _task_packages().get(name)
        if where is None:
            raise KeyError(name)
        _import_task(name, where)
    return _tables._TASKS[name]


def find_task(name: str) -> Task | None:
    """``get_task(name)``, or None for a task this installation does not know (rows of another one's)."""
    try:
        return get_task(name)
    except KeyError:
        return None


def forget_cut() -> None:
    """Forget the packages cut at the limit: asking again tries them again."""
    _CUT.clear()


@contextlib.contextmanager
def task_replaced(task: Task):
    """Within the block, ``task`` is the task registered under its name; after it, what was before
    (a test changing a task's fields in this process only)."""
    had, before = task.name in _tables._TASKS, _tables._TASKS.get(task.name)
    _tables._TASKS[task.name] = task
    try:
        yield task
    finally:
        if had:
            _tables._TASKS[task.name] = before
        else:
            _tables._TASKS.pop(task.name, None)

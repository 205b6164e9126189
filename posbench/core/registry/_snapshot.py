"""Putting the registry back as it was: a test's temporary plugin folders, the methods their files
registered and the tasks of temporary task packages leave with the test (tests/conftest.py)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from posbench.core.registry import _files, _imports, _tables, _tasks


@dataclass(frozen=True)
class Snapshot:
    """What ``forget_since`` goes back to: the ``--methods-dir`` folders, the methods and the tasks
    registered at the time of ``snapshot()``."""

    methods_dirs: tuple[Path, ...]
    methods: frozenset[str]
    tasks: frozenset[str]


def snapshot() -> Snapshot:
    return Snapshot(tuple(_files.methods_dirs()), frozenset(_tables._ORIGINS), frozenset(_tables._TASKS))


def forget_since(before: Snapshot, under: str) -> None:
    """The ``--methods-dir`` folders of ``before``; the methods registered since from files under
    folder ``under``, and the tasks declared since by modules under it, forgotten, and so is every
    import of a method file under it."""
    _files.set_methods_dirs(list(before.methods_dirs))
    for name, origin in list(_tables._ORIGINS.items()):
        if name not in before.methods and origin.startswith(under):
            _tables.unregister(name)
    _imports.forget_imports_under(under)
    for name, task in list(_tables._TASKS.items()):
        file = getattr(task.module, "__file__", None)
        if name not in before.tasks and file and str(Path(file).resolve()).startswith(under):
            del _tables._TASKS[name]


def reset_search() -> None:
    """No ``--methods-dir`` folder, and no method file or task package remembered as broken or cut
    at the import limit."""
    _files.set_methods_dirs([])
    _imports.forget_failures()
    _tasks.forget_cut()

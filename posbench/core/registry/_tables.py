"""The registry's tables, and the calls that fill them: methods, modifiers and tasks by name.

A method file registers its classes with ``@register`` (``@register_modifier``,
``register_variants``); a task package's task.py declares ``TASK = register_task(Task(...))``.
Only the modules of ``posbench.core.registry`` read the tables; everyone else asks the package.
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core.outcome import PosbenchError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import PositionMethod
    from posbench.core.task import Task


class RegistryError(PosbenchError, ValueError):
    """A duplicate, unknown or malformed method or task; the message is one line for the user."""


_METHODS: dict[str, type[PositionMethod]] = {}
_ORIGINS: dict[str, str] = {}  # method name -> the file that defines it
# A modifier composes with any method by a composed name, METHOD+MODIFIER (rotary+ssmax): its class's
# ``compose(base_cls)`` returns the composed method class. Modifiers are not methods of their own.
_MODIFIERS: dict[str, type] = {}
_MODIFIER_ORIGINS: dict[str, str] = {}
_TASKS: dict[str, Task] = {}


def _origin(cls: type) -> str:
    try:
        return str(Path(inspect.getfile(cls)).resolve())
    except (TypeError, OSError):
        return f"{cls.__module__}.{cls.__qualname__}"


def register(cls: type[PositionMethod]) -> type[PositionMethod]:
    """Class decorator: add a method under ``cls.name``. A second file using the name is an error."""
    from posbench.core.method import PositionMethod

    if not (isinstance(cls, type) and issubclass(cls, PositionMethod)):
        raise RegistryError(f"@register expects a PositionMethod subclass, got {cls!r}")
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.isidentifier():
        raise RegistryError(f"{_origin(cls)}: method name must be an identifier, got {name!r}")
    origin = _origin(cls)
    if name in _METHODS and _ORIGINS[name] != origin:
        raise RegistryError(f"duplicate method name {name!r}: defined in {_ORIGINS[name]} and in {origin}")
    _METHODS[name] = cls
    _ORIGINS[name] = origin
    return cls


def register_modifier(cls: type) -> type:
    """Class decorator: a modifier named ``cls.name`` that any method takes as ``METHOD+name``."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.isidentifier() or not callable(getattr(cls, "compose", None)):
        raise RegistryError(
            f"{_origin(cls)}: @register_modifier expects a class with an identifier name and compose(base_cls), got {cls!r}"
        )
    origin = _origin(cls)
    if name in _MODIFIERS and _MODIFIER_ORIGINS[name] != origin:
        raise RegistryError(f"duplicate modifier name {name!r}: defined in {_MODIFIER_ORIGINS[name]} and in {origin}")
    _MODIFIERS[name], _MODIFIER_ORIGINS[name] = cls, origin
    return cls


def register_variants(table: dict[str, dict], make) -> None:
    """Register ``make(name, options)``, a ``PositionMethod`` subclass named ``name``, for every row of
    ``table``: keep it a module-level dict literal, so listing reads the names without importing."""
    for name, options in table.items():
        cls = make(name, options)
        if getattr(cls, "name", None) != name:
            raise RegistryError(
                f"register_variants: {make.__name__}({name!r}, ...) made a method named "
                f"{getattr(cls, 'name', None)!r}; allowed: the row's name {name!r}"
            )
        register(cls)


def unregister(name: str) -> None:
    """Remove a method (tests use this to clean up after registering a throw-away one)."""
    _METHODS.pop(name, None)
    _ORIGINS.pop(name, None)


def registered() -> dict[str, type[PositionMethod]]:
    """name -> class of every method registered so far (reads no file, imports nothing)."""
    return dict(_METHODS)


def unregister_file(origin: str) -> None:
    """Remove the methods a file registered (a file that failed to import did not load)."""
    for name in [n for n, o in _ORIGINS.items() if o == origin]:
        unregister(name)


def names_from(origin: str) -> list[str]:
    """The methods registered from file ``origin``."""
    return [name for name, o in _ORIGINS.items() if o == origin]


def _declared_in(module_globals: dict) -> str:
    """The file of a module (its name when it has none)."""
    file = module_globals.get("__file__")
    return str(Path(file).resolve()) if file else module_globals.get("__name__", "?")


def register_task(task: Task) -> Task:
    """Add ``task`` under ``task.name``, with the declaring module as its ``module`` (the result
    is what a task.py binds: ``TASK = register_task(Task(...))``). A second module using the name is
    an error."""
    from posbench.core.task import Metric, Task

    if not isinstance(task, Task):
        raise RegistryError(f"register_task expects a posbench.core.task.Task, got {task!r}")
    name = task.name
    if not isinstance(name, str) or not name.lstrip("_").isidentifier():
        raise RegistryError(f"task name must be an identifier, got {name!r}")
    bad = next((k for k, v in task.METRICS.items() if not isinstance(v, Metric)), None)
    if bad is not None:
        raise RegistryError(f"task {name!r}: METRICS[{bad!r}] is not a posbench.core.task.Metric")
    caller = sys._getframe(1).f_globals
    known = _TASKS.get(name)
    if known is not None and known.module is not None and known.module.__name__ != caller.get("__name__"):
        raise RegistryError(
            f"duplicate task name {name!r}: declared in {_declared_in(vars(known.module))} and in {_declared_in(caller)}"
        )
    task = replace(task, module=sys.modules.get(caller.get("__name__", "?")))
    _TASKS[name] = task
    return task

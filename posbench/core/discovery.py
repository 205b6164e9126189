"""Finding position methods and tasks, and looking them up by name.

Methods: the built-in ``methods/*.py``, the folders of ``POSBENCH_METHODS_PATH`` and
``--methods-dir``, and the ``posbench.methods`` entry points. Tasks: the packages of
``posbench/tasks/``, of the folders of ``POSBENCH_TASKS_PATH``, and the ``posbench.tasks`` entry
points. Listing names reads files and folders (``list`` and ``validate`` need no torch); asking for
one name imports only what defines it, whose ``register``/``register_task`` calls
(``posbench.core.registry``) fill the tables, so a broken plugin fails only its own users.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from posbench.core import method_source, registry
from posbench.core.builtin import builtin_dir
from posbench.core.registry import RegistryError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import ModelConfig, PositionMethod
    from posbench.core.task import Task

METHODS_DIR = builtin_dir("methods")  # the checkout's methods/, or posbench/methods/ in a wheel
METHODS_ENV_PATH = "POSBENCH_METHODS_PATH"
METHODS_ENTRY_POINTS = "posbench.methods"
TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"  # posbench/tasks/, in a checkout and in a wheel
TASKS_ENV_PATH = "POSBENCH_TASKS_PATH"
TASKS_ENTRY_POINTS = "posbench.tasks"
# A method file imports in well under a second once torch is loaded; one that blocks at import
# is cut after this when its names are listed or ``check`` loads it (not in a case's worker).
IMPORT_LIMIT_S = 5.0
IMPORT_LIMIT_ENV = "POSBENCH_IMPORT_TIMEOUT_S"
# Method groups a suite or --methods may name instead of methods: "all" is every registered method.
GROUPS = ("all",)
COMPOSE_SEP = "+"  # METHOD+MODIFIER (rotary+ssmax), METHOD+MOD1+MOD2 (rotary+qknorm+gate)
PLUGIN_PLACE = 100  # where a modifier without a ``place`` goes: after the built-in ones

_SCANNED: set[str] = set()  # method files imported (or being imported)
_discovered = False
_extra_dirs: list[Path] = []
_BROKEN: dict[str, str] = {}  # file -> why it cannot be loaded (warned about once)
_TIMED_OUT: dict[str, float] = {}  # file -> the limit its import was cut at: not waited for again
_COMPOSED: dict[str, type] = {}  # composed name -> its class, built once


# --- importing a method file within a time limit ------------------------------------------------


class _ImportTimedOut(BaseException):
    """Raised into a blocked import by the timer (a BaseException: a plugin's ``except Exception``
    cannot swallow it)."""


def import_limit_s() -> float:
    """``POSBENCH_IMPORT_TIMEOUT_S`` when it is a positive number, else ``IMPORT_LIMIT_S``."""
    try:
        value = float(os.environ.get(IMPORT_LIMIT_ENV) or IMPORT_LIMIT_S)
    except ValueError:
        return IMPORT_LIMIT_S
    return value if 0 < value < math.inf else IMPORT_LIMIT_S


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Interrupt the block after ``seconds`` (SIGALRM; only on the main thread, else no limit).
    torch is imported first: its import is not the method file's to pay for."""
    if seconds is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    import posbench.core.method  # noqa: F401  (torch)

    armed = [True]

    def expire(signum, frame):
        if armed[0]:
            raise _ImportTimedOut()

    old = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    before, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # a timer someone else set: restored below
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if before:
            signal.setitimer(signal.ITIMER_REAL, max(before - (time.monotonic() - started), 1e-3))


def _import_file(path: Path, limit_s: float | None = None) -> None:
    path = path.resolve()
    if str(path) in _SCANNED:
        return
    _SCANNED.add(str(path))
    # A unique module name per file, so two folders may both hold e.g. "alibi.py".
    tag = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    module_name = f"posbench_methods_{path.stem}_{tag}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RegistryError(f"cannot import method file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        with _time_limit(limit_s):
            spec.loader.exec_module(module)
    except RegistryError:
        raise
    except (Exception, _ImportTimedOut) as exc:  # a broken plugin must say which file broke
        sys.modules.pop(module_name, None)
        _SCANNED.discard(str(path))  # asking again says why again
        for name in [n for n, o in registry._ORIGINS.items() if o == str(path)]:
            registry.unregister(name)  # classes registered before the error: the file did not load
        if isinstance(exc, _ImportTimedOut):
            _TIMED_OUT[str(path)] = limit_s
            exc = TimeoutError(
                f"its import did not finish within {limit_s:g} s (does it block at import?); "
                f"allowed: a method file that imports in seconds ({IMPORT_LIMIT_ENV} sets the limit)"
            )
        raise RegistryError(f"error importing method file {path}: {type(exc).__name__}: {exc}") from exc


# --- where method files are ----------------------------------------------------------------------


def _method_files(folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise RegistryError(f"methods folder {folder} does not exist or is not a folder")
    files = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        if not path.is_file():  # a FIFO or a device named *.py: reading it would block, never read
            _skip_broken(path, "not a regular file; allowed: a Python file")
            continue
        files.append(path)
    return files


def scan_dir(folder: str | os.PathLike) -> None:
    """Import every ``*.py`` in ``folder`` (not recursive)."""
    for path in _method_files(folder):
        _import_file(path)


def add_methods_dir(folder: str | os.PathLike) -> None:
    """Look in ``folder`` too from now on (the CLI's ``--methods-dir``); its files are read when
    names are listed and imported when one of their methods is used, not here."""
    folder = Path(folder)
    _method_files(folder)  # a missing folder is an error now, where the user typed it
    if folder not in _extra_dirs:
        _extra_dirs.append(folder)


def _skip_broken(path: Path, why: str) -> None:
    """Remember a file that cannot be loaded and say so once, on one line, naming the file."""
    where = str(path.resolve())
    if where not in _BROKEN:
        _BROKEN[where] = why
        print(f"warning: method file {where} skipped: {why}", file=sys.stderr)


def _try_import(path: Path, limit_s: float | None = None) -> bool:
    """Import a method file; a file that fails is skipped with a warning (False). Two files
    claiming one name stay an error: which of them is meant cannot be guessed."""
    if str(path.resolve()) in _TIMED_OUT:
        return False
    try:
        _import_file(path, limit_s)
        return True
    except RegistryError as exc:
        if str(exc).startswith("duplicate method name"):
            raise
        cause = exc.__cause__
        _skip_broken(path, f"{type(cause).__name__}: {cause}" if cause else str(exc))
        return False


def _env_folders(variable: str) -> list[Path]:
    """The folders of an ``os.pathsep``-separated variable (workers inherit it)."""
    return [Path(entry.strip()) for entry in os.environ.get(variable, "").split(os.pathsep) if entry.strip()]


def _method_folders() -> list[Path]:
    """Built-in methods, then ``POSBENCH_METHODS_PATH``, then ``--methods-dir`` folders."""
    return [METHODS_DIR] + _env_folders(METHODS_ENV_PATH) + _extra_dirs


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> tuple:
    """The entry points of ``group`` (installed packages do not change in a run)."""
    return tuple(importlib.metadata.entry_points(group=group))


def _load_method_entry_points() -> None:
    from posbench.core.method import PositionMethod

    for ep in _entry_points(METHODS_ENTRY_POINTS):
        try:
            obj = ep.load()
        except Exception as exc:
            raise RegistryError(f"entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        if isinstance(obj, type) and issubclass(obj, PositionMethod):
            if registry._METHODS.get(obj.name) is not obj:
                registry.register(obj)
        # A module entry point registers its classes through @register when it is loaded.


def discover(force: bool = False) -> dict[str, type[PositionMethod]]:
    """Import built-in, extra and entry-point methods once (skipping, with a warning, files
    that fail to import); return name -> class."""
    global _discovered
    if _discovered and not force:
        return dict(registry._METHODS)
    for folder in _method_folders():
        for path in _method_files(folder):
            _try_import(path)
    _load_method_entry_points()
    _discovered = True
    return dict(registry._METHODS)


# --- method lookups ------------------------------------------------------------------------------


def listing() -> dict[str, str]:
    """name -> origin (the file) of every method; a duplicate name is an error naming both. A file it
    can neither read nor import is skipped with a one-line warning; entry points load only if declared."""
    found: dict[str, str] = {}
    for folder in _method_folders():
        for path in _method_files(folder):
            where = str(path.resolve())
            literal = method_source.literal_names(path)
            if literal is None:
                syntax = method_source.syntax_error(path)
                if syntax:  # importing it would fail the same way
                    _skip_broken(path, syntax)
                    continue
                if not _try_import(path, import_limit_s()):  # a file that blocks: skipped in seconds
                    continue
                literal = [name for name, o in registry._ORIGINS.items() if o == where]
            for name in literal:
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate method name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    if _entry_points(METHODS_ENTRY_POINTS):
        discover()
    for name, where in registry._ORIGINS.items():  # entry points, and classes registered from code
        found.setdefault(name, where)
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(listing())


def modifiers() -> dict[str, str]:
    """name -> origin of every modifier, read from the method files (no import) and from code."""
    found: dict[str, str] = {}
    for folder in _method_folders():
        for path in _method_files(folder):
            where = str(path.resolve())
            for name in method_source.modifier_names(path):
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate modifier name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    for name, where in registry._MODIFIER_ORIGINS.items():
        found.setdefault(name, where)
    return dict(sorted(found.items()))


def recipes() -> dict[str, str]:
    """name -> origin of every recipe (a method built from other methods' parts, methods/recipes.py),
    read from the method files' ``RECIPES`` tables without importing them."""
    found: dict[str, str] = {}
    for folder in _method_folders():
        for path in _method_files(folder):
            found.update(dict.fromkeys(method_source.recipe_names(path), str(path.resolve())))
    return dict(sorted(found.items()))


def split_composed(name: str) -> tuple[str, str] | None:
    """``("rotary", "ssmax")`` for ``"rotary+ssmax"`` (the last ``+`` splits), None for a plain name."""
    base, sep, mod = str(name).rpartition(COMPOSE_SEP)
    return (base, mod) if sep else None


def _require_composed(name: str, base: str, mod: str) -> str:
    """The modifier's file for a composed name whose parts are known, else one line naming the part."""
    mods = modifiers()
    if mod not in mods:
        close = difflib.get_close_matches(mod, list(mods), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegistryError(
            f"unknown method {name!r}: {mod!r} is not a modifier{hint}; allowed: METHOD+MODIFIER "
            f"with a modifier from: {', '.join(mods) or 'none'}"
        )
    try:
        require(base)
    except RegistryError as exc:
        raise RegistryError(
            f"unknown method {name!r}: {str(exc).split('; known methods:')[0]}; allowed: "
            f"METHOD+{mod} with a registered METHOD (bench.py list)"
        ) from None
    return mods[mod]


def _compose(name: str, base: str, mod: str) -> type[PositionMethod]:
    """The class of composed method ``name`` (built once, then kept)."""
    origin = _require_composed(name, base, mod)
    if mod not in registry._MODIFIERS and Path(origin).is_file():
        _import_file(Path(origin))
    base_cls = get(base)
    applied = getattr(base_cls, "modifiers", ())  # the modifiers base already has, in name order
    _check_order(name, base_cls.name.split(COMPOSE_SEP)[0], applied + (mod,))
    cls = registry._MODIFIERS[mod].compose(base_cls)
    if getattr(cls, "name", None) != name:
        raise RegistryError(f"modifier {mod!r}: compose made a method named {getattr(cls, 'name', None)!r}; allowed: {name!r}")
    cls.modifiers = applied + (mod,)
    _COMPOSED[name] = cls  # not a registered method: listing() and "all" name methods, not compositions
    return cls


def modifier_place(mod: str) -> int:
    """Where modifier ``mod`` goes in a composed name: its class's ``place`` (ssmax 10, qknorm 20,
    sink 30, gate 40), ``PLUGIN_PLACE`` for a modifier that declares none."""
    return getattr(registry._MODIFIERS[mod], "place", PLUGIN_PLACE)


def _check_order(name: str, method: str, mods: tuple[str, ...]) -> None:
    """Modifiers compose in one fixed order, each once, the first innermost: ssmax scales the
    queries as METHOD attends, qknorm around it normalizes the raw q and k before that scale, sink
    joins the softmax, gate scales its output."""
    places = [modifier_place(m) for m in mods]
    if len(set(mods)) != len(mods) or places != sorted(places):
        for other, where in modifiers().items():  # the message names every modifier in its place
            if other not in registry._MODIFIERS and Path(where).is_file():
                _import_file(Path(where))
        ordered = sorted(dict.fromkeys(mods), key=modifier_place)
        raise RegistryError(
            f"unknown method {name!r}: modifiers compose once each, in the order "
            f"{', '.join(sorted(registry._MODIFIERS, key=modifier_place))}; allowed: {COMPOSE_SEP.join([method, *ordered])}"
        )


def _unknown(name: str, known: list[str]) -> RegistryError:
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    cut = {p: f"{p} (its import did not finish within {s:g} s)" for p, s in _TIMED_OUT.items()}
    broken = f"; skipped (cannot load): {', '.join(cut.get(p, p) for p in _BROKEN)}" if _BROKEN else ""
    return RegistryError(f"unknown method {name!r}{hint}; known methods: {', '.join(known)}{broken}")


def require(name: str) -> str:
    """The file defining method ``name``, without importing it; ``get``'s error when unknown."""
    found = listing()
    if name not in found:
        parts = split_composed(name)
        if parts:
            return _require_composed(name, *parts)
        if name in modifiers():
            raise RegistryError(
                f"unknown method {name!r}: {name!r} is a modifier, not a method; allowed: METHOD+{name} (e.g. rotary+{name})"
            )
        raise _unknown(name, list(found))
    return found[name]


def load_limited(method: str) -> str:
    """The file defining ``method``, imported within ``import_limit_s`` (``bench.py check``)."""
    origin = require(method)
    if Path(origin).is_file():
        _import_file(Path(origin), import_limit_s())
    get(method)
    return origin


def expand(names: list[str]) -> list[str]:
    """``names`` with each group replaced by its methods (those not already listed, sorted)."""
    out = [n for n in names if n not in GROUPS]
    if "all" in names:
        out += [n for n in listing() if n not in out]  # read from the files: no torch import
    return out


def origin(name: str) -> str:
    return require(name)


def get(name: str) -> type[PositionMethod]:
    """The class registered as ``name``, importing only the file that defines it; an unknown name
    lists the known ones with a suggestion. A file that fails to import raises, naming it."""
    if name in registry._METHODS:
        return registry._METHODS[name]
    parts = split_composed(name)
    if parts:
        return _COMPOSED.get(name) or _compose(name, *parts)
    where = require(name)
    if Path(where).is_file():
        _import_file(Path(where))
    if name not in registry._METHODS:  # registered under a name reading could not see: import everything
        discover()
    if name in registry._METHODS:
        return registry._METHODS[name]
    raise _unknown(name, sorted(registry._METHODS))


def build(cfg: ModelConfig) -> PositionMethod:
    """Instantiate ``cfg.method`` with ``cfg.method_options``; bad options are one clear line."""
    cls = get(cfg.method)
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "cfg")]
    unknown = sorted(set(cfg.method_options) - set(allowed))
    if unknown:
        raise RegistryError(
            f"method {cfg.method!r}: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(allowed) or 'none'}"
        )
    return cls(cfg, **cfg.method_options)


# --- tasks ---------------------------------------------------------------------------------------
# A task package is a folder holding an __init__.py and a task.py, whose register_task call declares
# the task under the folder's name: listing reads folders and imports nothing.


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

    for folder in [TASKS_DIR] + _env_folders(TASKS_ENV_PATH):
        if not folder.is_dir():
            raise RegistryError(f"tasks folder {folder} ({TASKS_ENV_PATH}) does not exist or is not a folder")
        for package in sorted(folder.iterdir()):
            if package.is_dir() and _is_task_package(package):
                add(package.name, str(package.resolve()))
    for ep in _entry_points(TASKS_ENTRY_POINTS):
        add(ep.name, f"entry point {ep.name} = {ep.value}")
    return found


def task_names(include_hidden: bool = False) -> list[str]:
    """Every task's name, sorted, without importing one; names starting with ``_`` (test-only) only
    with ``include_hidden``."""
    found = set(_task_packages()) | set(registry._TASKS)
    return sorted(n for n in found if include_hidden or not n.startswith("_"))


def _package_module(name: str, where: str) -> str:
    """The one module name a task package is imported under, so it is never imported twice."""
    if where.startswith("entry point "):
        return next(ep for ep in _entry_points(TASKS_ENTRY_POINTS) if ep.name == name).module
    if Path(where).parent == TASKS_DIR:
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
    """Import what ``where`` holds, which must register the task ``name``; else one line naming it.
    A package that fails leaves no module and no task behind, so asking again says why again."""
    before = dict(registry._TASKS)
    module_name = _package_module(name, where)
    try:
        _import_package(module_name, where)
    except Exception as exc:
        detail = str(exc) if isinstance(exc, RegistryError) else f"{type(exc).__name__}: {exc}"
        problem, cause = f"error importing task package {where}: {detail}", exc
    else:
        if name in registry._TASKS:
            return
        added = [n for n in registry._TASKS if n not in before]
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
    registry._TASKS.clear()
    registry._TASKS.update(before)
    raise RegistryError(problem) from cause


def get_task(name: str) -> Task:
    """The task registered as ``name``, importing only its package; an unknown name raises
    ``KeyError``, a package that does not register it one ``RegistryError`` line naming it."""
    if name not in registry._TASKS:
        where = _task_packages().get(name)
        if where is None:
            raise KeyError(name)
        _import_task(name, where)
    return registry._TASKS[name]


def find_task(name: str) -> Optional[Task]:
    """``get_task(name)``, or None for a task this installation does not know (rows of another one's)."""
    try:
        return get_task(name)
    except KeyError:
        return None

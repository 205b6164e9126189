"""Finding position methods: ``methods/*.py``, extra folders, and the ``posbench.methods`` entry points.

Scanning a folder imports each ``*.py`` not starting with ``_``, which runs its ``@register``
decorators; extra folders come from ``--methods-dir`` or ``POSBENCH_METHODS_PATH``. Listing names
(``listing``) reads the files instead, so ``list`` and ``validate`` need no torch; ``get`` and
``build`` import the one file that defines a name, so a broken plugin fails only its own users.
"""
from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import math
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core.builtin import builtin_dir
from posbench.core.outcome import PosbenchError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import ModelConfig, PositionMethod
    from posbench.core.task import Task

BUILTIN_DIR = builtin_dir("methods")  # the checkout's methods/, or posbench/methods/ in a wheel
ENV_PATH = "POSBENCH_METHODS_PATH"
ENTRY_POINT_GROUP = "posbench.methods"
# A method file imports in well under a second once torch is loaded; one that blocks at import
# is cut after this when its names are listed or ``check`` loads it (not in a case's worker).
IMPORT_LIMIT_S = 5.0
IMPORT_LIMIT_ENV = "POSBENCH_IMPORT_TIMEOUT_S"


class RegistryError(PosbenchError, ValueError):
    """A duplicate, unknown or malformed method; the message is one line for the user."""


_METHODS: dict[str, type[PositionMethod]] = {}
_ORIGINS: dict[str, str] = {}
_SCANNED: set[str] = set()
_discovered = False
_extra_dirs: list[Path] = []
_BROKEN: dict[str, str] = {}  # file -> why it cannot be loaded (warned about once)
_TIMED_OUT: dict[str, float] = {}  # file -> the limit its import was cut at: not waited for again


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


# A modifier composes with any method by a composed name, METHOD+MODIFIER (rotary+ssmax): its class's
# ``compose(base_cls)`` returns the composed method class. Modifiers are not methods of their own.
COMPOSE_SEP = "+"
_MODIFIERS: dict[str, type] = {}
_MODIFIER_ORIGINS: dict[str, str] = {}
_COMPOSED: dict[str, type] = {}  # composed name -> its class, built once


def register_modifier(cls: type) -> type:
    """Class decorator: a modifier named ``cls.name`` that any method takes as ``METHOD+name``."""
    name = getattr(cls, "name", "")
    if not isinstance(name, str) or not name.isidentifier() or not callable(getattr(cls, "compose", None)):
        raise RegistryError(f"{_origin(cls)}: @register_modifier expects a class with an identifier name and "
                            f"compose(base_cls), got {cls!r}")
    origin = _origin(cls)
    if name in _MODIFIERS and _MODIFIER_ORIGINS[name] != origin:
        raise RegistryError(f"duplicate modifier name {name!r}: defined in {_MODIFIER_ORIGINS[name]} and in {origin}")
    _MODIFIERS[name], _MODIFIER_ORIGINS[name] = cls, origin
    return cls


def register_variants(table: dict[str, dict], make) -> None:
    """Register ``make(name, options)``, a ``PositionMethod`` subclass named ``name``, for every row of
    ``table``: keep it a module-level dict literal, so ``listing`` reads the names without importing."""
    for name, options in table.items():
        cls = make(name, options)
        if getattr(cls, "name", None) != name:
            raise RegistryError(f"register_variants: {make.__name__}({name!r}, ...) made a method named "
                                f"{getattr(cls, 'name', None)!r}; allowed: the row's name {name!r}")
        register(cls)


def unregister(name: str) -> None:
    """Remove a method (tests use this to clean up after registering a throw-away one)."""
    _METHODS.pop(name, None)
    _ORIGINS.pop(name, None)


# Tasks: each task package's task.py declares ``TASK = register_task(Task(name=..., ...))``; the
# package is imported when its name is first asked for.
_TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` under ``task.name`` (returned unchanged, so a declaration reads
    ``TASK = register_task(Task(...))``). A second module using the name is an error."""
    from posbench.core.task import Metric, Task

    if not isinstance(task, Task):
        raise RegistryError(f"register_task expects a posbench.core.task.Task, got {task!r}")
    name = task.name
    if not isinstance(name, str) or not name.lstrip("_").isidentifier():
        raise RegistryError(f"task name must be an identifier, got {name!r}")
    bad = next((k for k, v in task.METRICS.items() if not isinstance(v, Metric)), None)
    if bad is not None:
        raise RegistryError(f"task {name!r}: METRICS[{bad!r}] is not a posbench.core.task.Metric")
    caller = sys._getframe(1).f_globals.get("__name__", "?")
    known = _TASKS.get(name)
    if known is not None and known.module is not None and known.module.__name__ != caller:
        raise RegistryError(f"duplicate task name {name!r}: declared in {known.module.__name__} and in {caller}")
    task = replace(task, module=sys.modules.get(caller))
    _TASKS[name] = task
    return task


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
        for name in [n for n, o in _ORIGINS.items() if o == str(path)]:
            unregister(name)  # classes registered before the error: the file did not load
        if isinstance(exc, _ImportTimedOut):
            _TIMED_OUT[str(path)] = limit_s
            exc = TimeoutError(f"its import did not finish within {limit_s:g} s (does it block at import?); "
                               f"allowed: a method file that imports in seconds ({IMPORT_LIMIT_ENV} sets the limit)")
        raise RegistryError(f"error importing method file {path}: {type(exc).__name__}: {exc}") from exc


def _method_files(folder: str | os.PathLike) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise RegistryError(f"methods folder {folder} does not exist or is not a folder")
    return [path for path in sorted(folder.glob("*.py")) if not path.name.startswith("_")]


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


def _folders() -> list[Path]:
    """Built-in methods, then ``POSBENCH_METHODS_PATH``, then ``--methods-dir`` folders."""
    env = [Path(entry.strip()) for entry in os.environ.get(ENV_PATH, "").split(os.pathsep) if entry.strip()]
    return [BUILTIN_DIR] + env + _extra_dirs


def _load_entry_points() -> None:
    from posbench.core.method import PositionMethod

    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            obj = ep.load()
        except Exception as exc:
            raise RegistryError(f"entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        if isinstance(obj, type) and issubclass(obj, PositionMethod):
            if _METHODS.get(obj.name) is not obj:
                register(obj)
        # A module entry point registers its classes through @register when it is loaded.


def discover(force: bool = False) -> dict[str, type[PositionMethod]]:
    """Import built-in, extra and entry-point methods once (skipping, with a warning, files
    that fail to import); return name -> class."""
    global _discovered
    if _discovered and not force:
        return dict(_METHODS)
    for folder in _folders():
        for path in _method_files(folder):
            _try_import(path)
    _load_entry_points()
    _discovered = True
    return dict(_METHODS)


def _is_register(node: ast.AST, name: str = "register") -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def _variant_names(tree: ast.Module) -> list[str] | None:
    """The keys of the tables passed to ``register_variants(TABLE, make)``, each a dict literal
    (inline, or assigned once at module level) with identifier keys; None when one is not."""
    literals: dict[str, ast.AST] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            literals[stmt.targets[0].id] = stmt.value if stmt.targets[0].id not in literals else None
    names: list[str] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_register(node.func, "register_variants")):
            continue
        table = node.args[0] if node.args else None
        if isinstance(table, ast.Name):
            table = literals.get(table.id)
        if not isinstance(table, ast.Dict):
            return None
        for key in table.keys:
            if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.isidentifier()):
                return None
            names.append(key.value)
    return names


def _class_name(node: ast.ClassDef) -> str | None:
    """The string literal assigned to ``name`` in the class body, if it is one."""
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "name" for t in targets):
            value = stmt.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str) and value.value.isidentifier():
                return value.value
            return None
    return None


def _literal_names(path: Path) -> list[str] | None:
    """The names a method file registers, read from its source (``@register`` classes' literal
    ``name``, literal ``register_variants`` tables); None, so the caller imports it, otherwise."""
    try:
        stat = path.stat()
        return _parse_names(path, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None  # importing the file raises the error that names it


@functools.lru_cache(maxsize=None)
def _parse_names(path: Path, mtime_ns: int, size: int) -> list[str] | None:
    """``_literal_names`` of one version of the file (validating a suite lists methods per name)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None
    names: list[str] = []
    decorators: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for dec in filter(_is_register, node.decorator_list):
                decorators.add(id(dec))
                name = _class_name(node)
                if name is None:
                    return None
                names.append(name)
        elif isinstance(node, ast.alias) and node.name in ("register", "register_variants") and \
                node.asname not in (None, node.name):
            return None
    if any(_is_register(node) and id(node) not in decorators for node in ast.walk(tree)):
        return None
    variants = _variant_names(tree)
    return None if variants is None else names + variants


def _syntax_error(path: Path) -> str | None:
    """``SyntaxError: invalid syntax (line 3)`` when the file does not parse, else None."""
    try:
        ast.parse(path.read_bytes(), str(path))
    except SyntaxError as exc:
        return f"{type(exc).__name__}: {exc.msg} (line {exc.lineno})"
    except (OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def listing() -> dict[str, str]:
    """name -> origin (the file) of every method; a duplicate name is an error naming both. A file it
    can neither read nor import is skipped with a one-line warning; entry points load only if declared."""
    found: dict[str, str] = {}
    for folder in _folders():
        for path in _method_files(folder):
            where = str(path.resolve())
            literal = _literal_names(path)
            if literal is None:
                syntax = _syntax_error(path)
                if syntax:  # importing it would fail the same way
                    _skip_broken(path, syntax)
                    continue
                if not _try_import(path, import_limit_s()):  # a file that blocks: skipped in seconds
                    continue
                literal = [name for name, o in _ORIGINS.items() if o == where]
            for name in literal:
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate method name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    if _entry_points_declared():
        discover()
    for name, where in _ORIGINS.items():  # entry points, and classes registered from code
        found.setdefault(name, where)
    return dict(sorted(found.items()))


@functools.lru_cache(maxsize=None)
def _entry_points_declared() -> bool:
    """Whether an installed package declares methods (installed packages do not change in a run)."""
    return bool(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))


def names() -> list[str]:
    return list(listing())


@functools.lru_cache(maxsize=None)
def _parse_modifiers(path: Path, mtime_ns: int, size: int) -> list[str]:
    """The literal names of the ``@register_modifier`` classes of one version of a method file."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    return [name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)
            and any(_is_register(d, "register_modifier") for d in node.decorator_list)
            and (name := _class_name(node)) is not None]


def modifiers() -> dict[str, str]:
    """name -> origin of every modifier, read from the method files (no import) and from code."""
    found: dict[str, str] = {}
    for folder in _folders():
        for path in _method_files(folder):
            stat, where = path.stat(), str(path.resolve())
            for name in _parse_modifiers(path, stat.st_mtime_ns, stat.st_size):
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate modifier name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    for name, where in _MODIFIER_ORIGINS.items():
        found.setdefault(name, where)
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
        raise RegistryError(f"unknown method {name!r}: {mod!r} is not a modifier{hint}; allowed: METHOD+MODIFIER "
                            f"with a modifier from: {', '.join(mods) or 'none'}")
    try:
        require(base)
    except RegistryError as exc:
        raise RegistryError(f"unknown method {name!r}: {str(exc).split('; known methods:')[0]}; allowed: "
                            f"METHOD+{mod} with a registered METHOD (bench.py list)") from None
    return mods[mod]


def _compose(name: str, base: str, mod: str) -> type[PositionMethod]:
    """The class of composed method ``name`` (built once, then kept in the registry)."""
    origin = _require_composed(name, base, mod)
    if mod not in _MODIFIERS and Path(origin).is_file():
        _import_file(Path(origin))
    cls = _MODIFIERS[mod].compose(get(base))
    if getattr(cls, "name", None) != name:
        raise RegistryError(f"modifier {mod!r}: compose made a method named {getattr(cls, 'name', None)!r}; "
                            f"allowed: {name!r}")
    _COMPOSED[name] = cls  # not in _METHODS: listing() and "all" name methods, not compositions
    return cls


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
            raise RegistryError(f"unknown method {name!r}: {name!r} is a modifier, not a method; allowed: "
                                f"METHOD+{name} (e.g. rotary+{name})")
        raise _unknown(name, list(found))
    return found[name]


# Method groups a suite or --methods may name instead of methods: "all" is every registered method.
GROUPS = ("all",)


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
    if name in _METHODS:
        return _METHODS[name]
    parts = split_composed(name)
    if parts:
        return _COMPOSED.get(name) or _compose(name, *parts)
    where = require(name)
    if Path(where).is_file():
        _import_file(Path(where))
    if name not in _METHODS:  # registered under a name reading could not see: import everything
        discover()
    if name in _METHODS:
        return _METHODS[name]
    raise _unknown(name, sorted(_METHODS))


def build(cfg: ModelConfig) -> PositionMethod:
    """Instantiate ``cfg.method`` with ``cfg.method_options``; bad options are one clear line."""
    cls = get(cfg.method)
    allowed = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "cfg")]
    unknown = sorted(set(cfg.method_options) - set(allowed))
    if unknown:
        raise RegistryError(
            f"method {cfg.method!r}: unknown option(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(allowed) or 'none'}"
        )
    return cls(cfg, **cfg.method_options)

"""Finding position methods: ``methods/*.py``, extra folders, and the ``posbench.methods`` entry points.

A method file defines a ``PositionMethod`` subclass and decorates it with ``@register``. Scanning a
folder imports each ``*.py`` file in it (files starting with ``_`` are skipped), which runs the
decorators. Extra folders come from ``--methods-dir`` or ``POSBENCH_METHODS_PATH`` (``os.pathsep``
separated). Packages expose classes through the entry-point group ``posbench.methods``.
"""
from __future__ import annotations

import difflib
import hashlib
import importlib.metadata
import importlib.util
import inspect
import os
import sys
from pathlib import Path

from .method import ModelConfig, PositionMethod

BUILTIN_DIR = Path(__file__).resolve().parent.parent / "methods"
ENV_PATH = "POSBENCH_METHODS_PATH"
ENTRY_POINT_GROUP = "posbench.methods"


class RegistryError(ValueError):
    """A duplicate, unknown or malformed method; the message is one line for the user."""


_METHODS: dict[str, type[PositionMethod]] = {}
_ORIGINS: dict[str, str] = {}
_SCANNED: set[str] = set()
_discovered = False
_extra_dirs: list[Path] = []


def _origin(cls: type) -> str:
    try:
        return str(Path(inspect.getfile(cls)).resolve())
    except (TypeError, OSError):
        return f"{cls.__module__}.{cls.__qualname__}"


def register(cls: type[PositionMethod]) -> type[PositionMethod]:
    """Class decorator: add a method under ``cls.name``. A second file using the name is an error."""
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


def unregister(name: str) -> None:
    """Remove a method (tests use this to clean up after registering a throw-away one)."""
    _METHODS.pop(name, None)
    _ORIGINS.pop(name, None)


def _import_file(path: Path) -> None:
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
        spec.loader.exec_module(module)
    except RegistryError:
        raise
    except Exception as exc:  # a broken plugin must say which file broke
        sys.modules.pop(module_name, None)
        raise RegistryError(f"error importing method file {path}: {type(exc).__name__}: {exc}") from exc


def scan_dir(folder: str | os.PathLike) -> None:
    """Import every ``*.py`` in ``folder`` (not recursive)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RegistryError(f"methods folder {folder} does not exist or is not a folder")
    for path in sorted(folder.glob("*.py")):
        if not path.name.startswith("_"):
            _import_file(path)


def add_methods_dir(folder: str | os.PathLike) -> None:
    """Scan ``folder`` now and on every later discovery (the CLI's ``--methods-dir``)."""
    folder = Path(folder)
    if folder not in _extra_dirs:
        _extra_dirs.append(folder)
    scan_dir(folder)


def _load_entry_points() -> None:
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
    """Scan built-in, extra and entry-point methods once; return name -> class."""
    global _discovered
    if _discovered and not force:
        return dict(_METHODS)
    scan_dir(BUILTIN_DIR)
    for entry in os.environ.get(ENV_PATH, "").split(os.pathsep):
        if entry.strip():
            scan_dir(entry.strip())
    for folder in _extra_dirs:
        scan_dir(folder)
    _load_entry_points()
    _discovered = True
    return dict(_METHODS)


def names() -> list[str]:
    return sorted(discover())


# Method groups a suite or --methods may name instead of methods: "all" is every registered method.
GROUPS = ("all",)


def expand(names: list[str]) -> list[str]:
    """``names`` with each group replaced by its methods (those not already listed, sorted)."""
    out = [n for n in names if n not in GROUPS]
    if "all" in names:
        out += [n for n in sorted(discover()) if n not in out]
    return out


def origin(name: str) -> str:
    discover()
    return _ORIGINS[name]


def get(name: str) -> type[PositionMethod]:
    """The class registered as ``name``; an unknown name lists the known ones with a suggestion."""
    methods = discover()
    if name in methods:
        return methods[name]
    known = sorted(methods)
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise RegistryError(f"unknown method {name!r}{hint}; known methods: {', '.join(known)}")


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

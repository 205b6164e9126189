"""Method files and folders: the built-in ``methods/*.py``, the folders of ``POSBENCH_METHODS_PATH``
and ``--methods-dir``, and the ``posbench.methods`` entry points.

Listing names reads the files (``posbench.core.method_source``) and imports only a file whose names
reading cannot see, within the import limit; ``discover`` imports them all.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core import method_source
from posbench.core.registry import _imports, _places, _tables
from posbench.core.registry._tables import RegistryError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import PositionMethod

_extra_dirs: list[Path] = []  # the --methods-dir folders, in the order given
_discovered = False


def method_files(folder: str | os.PathLike) -> list[Path]:
    """The method files of ``folder``: its ``*.py`` not starting with ``_`` (not recursive)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise RegistryError(f"methods folder {folder} does not exist or is not a folder")
    files = []
    for path in sorted(folder.glob("*.py")):
        if path.name.startswith("_"):
            continue
        if not path.is_file():  # a FIFO or a device named *.py: reading it would block, never read
            _imports.skip_broken(path, "not a regular file; allowed: a Python file")
            continue
        files.append(path)
    return files


def scan_dir(folder: str | os.PathLike) -> None:
    """Import every ``*.py`` in ``folder`` (not recursive)."""
    for path in method_files(folder):
        _imports.import_file(path)


def add_methods_dir(folder: str | os.PathLike) -> None:
    """Look in ``folder`` too from now on (the CLI's ``--methods-dir``); its files are read when
    names are listed and imported when one of their methods is used, not here."""
    folder = Path(folder)
    method_files(folder)  # a missing folder is an error now, where the user typed it
    if folder not in _extra_dirs:
        _extra_dirs.append(folder)


def methods_dirs() -> list[Path]:
    """The ``--methods-dir`` folders added so far."""
    return list(_extra_dirs)


def set_methods_dirs(folders: list[Path]) -> None:
    """Look in exactly ``folders`` besides the built-in and ``POSBENCH_METHODS_PATH`` ones."""
    _extra_dirs[:] = folders


def method_folders() -> list[Path]:
    """Built-in methods, then ``POSBENCH_METHODS_PATH``, then ``--methods-dir`` folders."""
    return [_places.METHODS_DIR] + _places.env_folders(_places.METHODS_ENV_PATH) + _extra_dirs


def _load_method_entry_points() -> None:
    from posbench.core.method import PositionMethod

    for ep in _places.entry_points(_places.METHODS_ENTRY_POINTS):
        try:
            obj = ep.load()
        except Exception as exc:
            raise RegistryError(f"entry point {ep.name!r} ({ep.value}) failed to load: {exc}") from exc
        if isinstance(obj, type) and issubclass(obj, PositionMethod):
            if _tables._METHODS.get(obj.name) is not obj:
                _tables.register(obj)
        # A module entry point registers its classes through @register when it is loaded.


def discover(force: bool = False) -> dict[str, type[PositionMethod]]:
    """Import built-in, extra and entry-point methods once (skipping, with a warning, files
    that fail to import); return name -> class."""
    global _discovered
    if _discovered and not force:
        return _tables.registered()
    for folder in method_folders():
        for path in method_files(folder):
            _imports.try_import(path)
    _load_method_entry_points()
    _discovered = True
    return _tables.registered()


def listing() -> dict[str, str]:
    """name -> origin (the file) of every method; a duplicate name is an error naming both. A file it
    can neither read nor import is skipped with a one-line warning; entry points load only if declared."""
    found: dict[str, str] = {}
    for folder in method_folders():
        for path in method_files(folder):
            where = str(path.resolve())
            literal = method_source.literal_names(path)
            if literal is None:
                syntax = method_source.syntax_error(path)
                if syntax:  # importing it would fail the same way
                    _imports.skip_broken(path, syntax)
                    continue
                if not _imports.try_import(path, _imports.import_limit_s()):  # a file that blocks: skipped in seconds
                    continue
                literal = _tables.names_from(where)
            for name in literal:
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate method name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    if _places.entry_points(_places.METHODS_ENTRY_POINTS):
        discover()
    for name, where in _tables._ORIGINS.items():  # entry points, and classes registered from code
        found.setdefault(name, where)
    return dict(sorted(found.items()))


def names() -> list[str]:
    return list(listing())


def modifiers() -> dict[str, str]:
    """name -> origin of every modifier, read from the method files (no import) and from code."""
    found: dict[str, str] = {}
    for folder in method_folders():
        for path in method_files(folder):
            where = str(path.resolve())
            for name in method_source.modifier_names(path):
                if found.get(name, where) != where:
                    raise RegistryError(f"duplicate modifier name {name!r}: defined in {found[name]} and in {where}")
                found[name] = where
    for name, where in _tables._MODIFIER_ORIGINS.items():
        found.setdefault(name, where)
    return dict(sorted(found.items()))


def recipes() -> dict[str, str]:
    """name -> origin of every recipe (a method built from other methods' parts, methods/recipes.py),
    read from the method files' ``RECIPES`` tables without importing them."""
    found: dict[str, str] = {}
    for folder in method_folders():
        for path in method_files(folder):
            found.update(dict.fromkeys(method_source.recipe_names(path), str(path.resolve())))
    return dict(sorted(found.items()))

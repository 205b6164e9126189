"""Looking a method up by name: the file that defines it (without importing it), its class
(importing only that file), an instance built from a ``ModelConfig``, and the method groups.
An unknown name is one line listing the known ones, with a suggestion."""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core.registry import _compose, _files, _imports, _tables
from posbench.core.registry._tables import RegistryError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import ModelConfig, PositionMethod

# Method groups a suite or --methods may name instead of methods: "all" is every registered method.
GROUPS = ("all",)


def _unknown(name: str, known: list[str]) -> RegistryError:
    close = difflib.get_close_matches(str(name), known, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return RegistryError(f"unknown method {name!r}{hint}; known methods: {', '.join(known)}{_imports.skipped()}")


def _require_composed(name: str, base: str, mod: str) -> str:
    """The modifier's file for a composed name whose parts are known, else one line naming the part."""
    origin = _compose.modifier_origin(name, mod)
    try:
        require(base)
    except RegistryError as exc:
        raise RegistryError(
            f"unknown method {name!r}: {str(exc).split('; known methods:')[0]}; allowed: "
            f"METHOD+{mod} with a registered METHOD (bench.py list)"
        ) from None
    _compose.check_order(name)
    return origin


def require(name: str) -> str:
    """The file defining method ``name``, without importing it; ``get``'s error when unknown."""
    found = _files.listing()
    if name not in found:
        parts = _compose.split_composed(name)
        if parts:
            return _require_composed(name, *parts)
        if name in _files.modifiers():
            raise RegistryError(
                f"unknown method {name!r}: {name!r} is a modifier, not a method; allowed: METHOD+{name} (e.g. rotary+{name})"
            )
        raise _unknown(name, list(found))
    return found[name]


def origin(name: str) -> str:
    return require(name)


def load_limited(method: str) -> str:
    """The file defining ``method``, imported within ``import_limit_s`` (``bench.py check``)."""
    where = require(method)
    if Path(where).is_file():
        _imports.import_file(Path(where), _imports.import_limit_s())
    get(method)
    return where


def expand(names: list[str]) -> list[str]:
    """``names`` with each group replaced by its methods (those not already listed, sorted)."""
    out = [n for n in names if n not in GROUPS]
    if "all" in names:
        out += [n for n in _files.listing() if n not in out]  # read from the files: no torch import
    return out


def _get_composed(name: str, base: str, mod: str) -> type[PositionMethod]:
    """The class of composed method ``name`` (built once, then kept)."""
    built = _compose.cached(name)
    if built is not None:
        return built
    _compose.load_modifier(mod, _require_composed(name, base, mod))
    return _compose.compose(name, get(base), mod)


def get(name: str) -> type[PositionMethod]:
    """The class registered as ``name``, importing only the file that defines it; an unknown name
    lists the known ones with a suggestion. A file that fails to import raises, naming it."""
    if name in _tables._METHODS:
        return _tables._METHODS[name]
    parts = _compose.split_composed(name)
    if parts:
        return _get_composed(name, *parts)
    where = require(name)
    if Path(where).is_file():
        _imports.import_file(Path(where))
    if name not in _tables._METHODS:  # registered under a name reading could not see: import everything
        _files.discover()
    if name in _tables._METHODS:
        return _tables._METHODS[name]
    raise _unknown(name, sorted(_tables._METHODS))


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

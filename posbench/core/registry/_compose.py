"""Composed names, METHOD+MODIFIER (``rotary+ssmax``, ``rotary+qknorm+gate``): splitting them, the
fixed order modifiers compose in, and the composed class, built once by the modifier's
``compose(base_cls)``. A composed method is not registered: ``listing`` and "all" name methods."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import TYPE_CHECKING

from posbench.core import method_source
from posbench.core.registry import _files, _imports, _tables
from posbench.core.registry._tables import RegistryError

if TYPE_CHECKING:  # posbench.core.method imports torch; only what needs a class imports it
    from posbench.core.method import PositionMethod

COMPOSE_SEP = "+"  # METHOD+MODIFIER (rotary+ssmax), METHOD+MOD1+MOD2 (rotary+qknorm+gate)
PLUGIN_PLACE = 100  # where a modifier without a ``place`` goes: after the built-in ones
# What a modifier changes (its class's ``acts_on``): the attention probabilities P (through q, k,
# the scores or the softmax) or attention's output after P v. The attention probe reads P beneath
# the modifiers that act on the output.
ACTS_ON = ("probabilities", "output")

_COMPOSED: dict[str, type] = {}  # composed name -> its class, built once


def split_composed(name: str) -> tuple[str, str] | None:
    """``("rotary", "ssmax")`` for ``"rotary+ssmax"`` (the last ``+`` splits), None for a plain name."""
    base, sep, mod = str(name).rpartition(COMPOSE_SEP)
    return (base, mod) if sep else None


def modifier_origin(name: str, mod: str) -> str:
    """The file of modifier ``mod`` of composed name ``name``; one line naming the modifiers if unknown."""
    mods = _files.modifiers()
    if mod not in mods:
        close = difflib.get_close_matches(mod, list(mods), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise RegistryError(
            f"unknown method {name!r}: {mod!r} is not a modifier{hint}; allowed: METHOD+MODIFIER "
            f"with a modifier from: {', '.join(mods) or 'none'}"
        )
    return mods[mod]


def load_modifier(mod: str, origin: str) -> None:
    """Import the file of modifier ``mod`` unless it is registered already."""
    if mod not in _tables._MODIFIERS and Path(origin).is_file():
        _imports.import_file(Path(origin))


def cached(name: str) -> type[PositionMethod] | None:
    """The class of composed method ``name`` if it was built already."""
    return _COMPOSED.get(name)


def compose(name: str, base_cls: type[PositionMethod], mod: str) -> type[PositionMethod]:
    """The class of composed method ``name``: modifier ``mod`` (loaded) applied to ``base_cls``."""
    applied = getattr(base_cls, "modifiers", ())  # the modifiers base already has, in name order
    _check_order(name, base_cls.name.split(COMPOSE_SEP)[0], applied + (mod,), modifier_place, _every_imported)
    cls = _tables._MODIFIERS[mod].compose(base_cls)
    if getattr(cls, "name", None) != name:
        raise RegistryError(f"modifier {mod!r}: compose made a method named {getattr(cls, 'name', None)!r}; allowed: {name!r}")
    cls.modifiers = applied + (mod,)
    _COMPOSED[name] = cls  # not a registered method: listing() and "all" name methods, not compositions
    return cls


def modifier_place(mod: str) -> int:
    """Where modifier ``mod`` goes in a composed name: its class's ``place`` (ssmax 10, qknorm 20,
    sink 30, gate 40), ``PLUGIN_PLACE`` for a modifier that declares none."""
    return getattr(_tables._MODIFIERS[mod], "place", PLUGIN_PLACE)


def modifier_acts_on(mod: str) -> str | None:
    """What modifier ``mod`` (loaded) changes, one of ``ACTS_ON`` (ssmax, qknorm and sink the
    probabilities, gate the output), or None when its class does not say."""
    acts = getattr(_tables._MODIFIERS[mod], "acts_on", None)
    return acts if acts in ACTS_ON else None


def check_order(name: str) -> None:
    """``_check_order`` of composed name ``name`` read from the modifiers' files, without importing
    them (validating a suite imports no torch): a name out of order is refused where it is named,
    not by each case. A modifier whose file does not say its place is checked when composed."""
    places = {}
    for mod, where in _files.modifiers().items():
        registered = mod in _tables._MODIFIERS
        places[mod] = modifier_place(mod) if registered else method_source.modifier_places(Path(where), PLUGIN_PLACE).get(mod)
    method, *mods = name.split(COMPOSE_SEP)
    if all(places.get(m) is not None for m in mods):
        _check_order(name, method, tuple(mods), places.get, lambda: [m for m, p in places.items() if p is not None])


def _every_imported() -> list[str]:
    """Every modifier, each file imported (the message names every modifier in its place)."""
    for other, where in _files.modifiers().items():
        if other not in _tables._MODIFIERS and Path(where).is_file():
            _imports.import_file(Path(where))
    return list(_tables._MODIFIERS)


def _check_order(name: str, method: str, mods: tuple[str, ...], place, every) -> None:
    """Modifiers compose in one fixed order, each once, the first innermost: ssmax scales the
    queries as METHOD attends, qknorm around it normalizes the raw q and k before that scale, sink
    joins the softmax, gate scales its output. ``place``: a modifier's place; ``every()``: the
    modifiers the message lists."""
    places = [place(m) for m in mods]
    if len(set(mods)) != len(mods) or places != sorted(places):
        ordered = sorted(dict.fromkeys(mods), key=place)
        raise RegistryError(
            f"unknown method {name!r}: modifiers compose once each, in the order "
            f"{', '.join(sorted(every(), key=place))}; allowed: {COMPOSE_SEP.join([method, *ordered])}"
        )

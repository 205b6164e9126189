"""File names and HTML ids built from row text: safe, unique and stable.

Row text (method, probe and machine names, grid values) comes from stored files anyone may have
written, so it never becomes a path as it is. ``slug`` and ``file_stem`` keep ASCII letters,
digits and a few separators, and add a short hash of the raw text whenever they had to drop
something that could tell two names apart (or nothing was left, or the name was too long).
``unique_keys`` settles the rest: two tables whose slugs still collide (``Acme X-1`` and
``Acme X 1`` both give ``acme-x-1``) each get a hash of what they show, so neither overwrites the
other's files or shares its HTML id, and the same rows always give the same names.
"""

from __future__ import annotations

from collections.abc import Iterable

from posbench.store.file_stems import MAX_STEM, file_stem, short_hash


def slug(text: str) -> str:
    """``text`` lowercased, runs of anything but ASCII letters and digits as one ``-``: a table
    key. Empty or over ``MAX_STEM`` characters: cut, plus a hash of the raw text."""
    out = "".join(ch if ch.isascii() and ch.isalnum() else "-" for ch in str(text).lower())
    while "--" in out:
        out = out.replace("--", "-")
    out = out.strip("-")
    if not out or len(out) > MAX_STEM:
        out = "-".join(p for p in (out[:MAX_STEM].strip("-"), short_hash(text)) if p)
    return out


def unique_keys(tables: Iterable) -> None:
    """Give every table (anything with a ``key``, ``task``, ``metric``, ``title``, ``hardware``
    and ``caption``) a key no other has: each of a group that shares a key gets a hash of what it
    shows appended (a counter after that for tables identical in every word)."""
    tables = list(tables)
    groups: dict[str, list] = {}
    for t in tables:
        groups.setdefault(t.key, []).append(t)
    used = set(groups)
    for key, group in groups.items():
        if len(group) < 2:
            continue
        for t in group:
            what = "\x1f".join(str(getattr(t, a, "")) for a in ("task", "metric", "title", "hardware", "caption"))
            new, n = f"{key}-{short_hash(what)}", 2
            while new in used:
                new, n = f"{key}-{short_hash(what)}-{n}", n + 1
            used.add(new)
            t.key = new


class Stems:
    """Chart file stems handed out while a report is drawn: each safe (``file_stem``) and unique;
    a stem asked for again by another chart gets a hash of that chart's title."""

    def __init__(self):
        self.used: dict[str, str] = {}

    def take(self, stem: str, title: str) -> str:
        safe = file_stem(stem)
        what = f"{stem}\x1f{title}"
        if self.used.get(safe, what) != what:
            base, n = f"{safe}-{short_hash(what)}", 2
            safe = base
            while safe in self.used and self.used[safe] != what:
                safe, n = f"{base}-{n}", n + 1
        self.used[safe] = what
        return safe

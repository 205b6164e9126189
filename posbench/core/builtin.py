"""Where the built-in ``methods`` and ``suites`` folders are, in a checkout and in a wheel."""

from __future__ import annotations

from pathlib import Path


def builtin_dir(name: str) -> Path:
    """The folder of the built-in ``methods`` or ``suites``: inside the package in a wheel, else the
    checkout's top level (docs/architecture.md, Packaging)."""
    package = Path(__file__).resolve().parents[1]  # posbench/
    inside = package / name
    return inside if inside.is_dir() else package.parent / name

"""The folder the docs/results pages go to (``--out``), and which of its files are theirs.

``make docs-results`` rebuilds every page and removes the pages no published run gives any more,
so it must know which files it wrote: the folder keeps a manifest, ``MANIFEST``, one page's file
name a line, and a rebuild replaces and removes only those. Before anything is written, a folder
holding anything else (a ``NOTES.txt``, a ``guide.md``, a subfolder: ``--out .`` or
``DOCS_RESULTS=docs``) is refused in one line, and so is an ``--out`` that is a file or a link, a
manifest line that is no page's file name, and a listed page that is no longer a regular file.
The pages' charts (``charts/<name>.svg`` and ``.json``, ``page_charts``) are listed and owned the
same way, in a ``charts/`` folder holding nothing else.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from posbench.core.files import atomic_write_bytes, own_folder
from posbench.store.bounds import open_regular, size_text

MANIFEST = ".generated"
MANIFEST_HEAD = (
    "# The pages make docs-results wrote here (posbench/report/page_folder.py), one a line:\n"
    "# a rebuild replaces and removes only these, and refuses a folder holding any other file.\n"
)
PAGE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\.md")  # one file name, never a path
CHARTS = "charts"
CHART_NAME = re.compile(rf"{CHARTS}/[a-z0-9][a-z0-9-]{{0,200}}\.(svg|json)")  # a chart's file, one level down
MAX_MANIFEST = 2**16
ALLOWED = "a folder (created when missing)"


class PageError(ValueError):
    """A run folder that cannot become a page, or an output folder pages cannot go to; the
    message is one line naming it."""


def _shown(name: str) -> str:
    return name if name.isprintable() else repr(name)


def _listed(out: Path) -> set[str]:
    """The page names ``out``'s manifest lists (none without a manifest)."""
    path = out / MANIFEST
    fh = open_regular(path)  # a FIFO there is a RowsError, never a hang
    if fh is None:
        return set()
    with fh:
        data = fh.read(MAX_MANIFEST + 1)
    if len(data) > MAX_MANIFEST:
        raise PageError(f"{path}: larger than {size_text(MAX_MANIFEST)}; allowed: the list of pages written there")
    names = set()
    for n, line in enumerate(str(data, "utf-8", "replace").splitlines(), 1):
        if line and not line.startswith("#"):
            if not (PAGE_NAME.fullmatch(line) or CHART_NAME.fullmatch(line)):
                raise PageError(
                    f"{path}: line {n}, {line!r}, is no page's file name; allowed: file names of pages "
                    "in that folder (letters, digits, _ . -, ending .md), charts/<name>.svg|json, or # comments"
                )
            names.add(line)
    return names


def owned_pages(out: Path) -> set[str]:
    """The pages ``out`` holds that its manifest lists (none when ``out`` is missing);
    ``PageError`` when ``out`` is no real folder or holds anything else."""
    try:
        mode = os.lstat(out).st_mode
    except FileNotFoundError:
        return set()
    if stat.S_ISLNK(mode):
        raise PageError(f"--out {out}: a symbolic link; allowed: {ALLOWED}, not a link to one")
    if not stat.S_ISDIR(mode):
        raise PageError(f"--out {out}: a file, not a folder; allowed: {ALLOWED}")
    listed = _listed(out)
    entries = sorted(os.scandir(out), key=lambda e: e.name)
    foreign, present = [], {entry.name for entry in entries}
    for entry in entries:
        if entry.name == CHARTS and entry.is_dir(follow_symlinks=False):
            charts = sorted(os.scandir(entry.path), key=lambda e: e.name)
            present |= {f"{CHARTS}/{e.name}" for e in charts}
            foreign += [
                _shown(f"{CHARTS}/{e.name}")
                for e in charts
                if not e.is_file(follow_symlinks=False) or f"{CHARTS}/{e.name}" not in listed
            ]
        elif not entry.is_file(follow_symlinks=False) or (entry.name != MANIFEST and entry.name not in listed):
            foreign.append(_shown(entry.name))
    if foreign:
        more = f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        raise PageError(
            f"--out {out}: holds {', '.join(foreign[:5])}{more}, which make docs-results did not write; allowed: "
            f"a new or empty folder, or one holding only the pages make docs-results wrote there (listed in its {MANIFEST})"
        )
    return listed & present  # a listed page since removed is no longer owned


def _write_manifest(out: Path, names: set[str]) -> None:
    ordered = sorted(names, key=lambda name: (not name.startswith(f"{CHARTS}/"), name))  # charts, then the pages
    atomic_write_bytes(out / MANIFEST, (MANIFEST_HEAD + "".join(f"{name}\n" for name in ordered)).encode())


def write_owned(out: Path, pages: dict[str, str | bytes], owned: set[str], prune: bool) -> list[Path]:
    """Write ``pages`` (file name, or ``charts/<name>``, -> text or bytes) into ``out``, which
    ``owned_pages`` returned ``owned`` for, and list them in its manifest; with ``prune``, remove
    the owned files ``pages`` lacks. Return the written paths, in ``pages``' order."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a folder it cannot create
        raise PageError(f"--out {out}: {exc.strerror or exc}; allowed: {ALLOWED}") from None
    keep = set(pages) | (set() if prune else owned)
    _write_manifest(out, keep | owned)  # first: a page written is listed even if the rebuild stops
    if any(name.startswith(f"{CHARTS}/") for name in pages):
        own_folder(out / CHARTS)  # a real folder, never a link that sends the charts elsewhere
    written = [atomic_write_bytes(out / name, text if isinstance(text, bytes) else text.encode()) for name, text in pages.items()]
    for name in sorted(owned - keep):
        (out / name).unlink(missing_ok=True)
    if (out / CHARTS).is_dir() and not (out / CHARTS).is_symlink() and not any((out / CHARTS).iterdir()):
        (out / CHARTS).rmdir()
    if owned - keep:
        _write_manifest(out, keep)
    return written

"""``bench.py publish RUN``: a run folder's rows and records copied into the repository, under
``results/published/<suite>/<run-id>/``, so that every docs/results page can be rebuilt from
committed rows and anyone can re-analyse them (as asv publishes its result JSON and MLPerf its logs).

Copied: ``cases.jsonl`` (or a launched sweep's ``rows/*.jsonl``), ``run.json`` and ``env.json``,
byte for byte. Never copied: checkpoints, TensorBoard event files (``cases/``), tables (rebuilt
from the rows), locks. A run of more than ``MAX_RUN_BYTES`` is refused, and so is one that would
take the published rows past ``MAX_TOTAL_BYTES``: a repository is no data store.

The destination is built from checked names only (issue 67): run.json's suite and the name of the
folder the run resolves to, each one plain path component (a suite's name rule); a run folder at
or inside the published root is refused, and so is a link (or a file) where a folder of the
destination belongs. Replacing an earlier copy deletes only files of the published set
(``cases.jsonl``, ``rows/*.jsonl``, ``run.json``, ``env.json``) in that run's own folder.

A published run must be reproducible from the repository (issue 69): a run from a tree with
uncommitted changes (env.json's ``git_dirty``) is refused, and so is one whose methods came from
outside the repository (a ``--methods-dir`` in run.json's command, or a folder of
``POSBENCH_METHODS_PATH`` in env.json's ``methods_path``, that is absolute, starts with ``~`` or
climbs out with ``..``), unless the caller allows it (``allow_dirty``, ``allow_outside_methods``);
the page of such a run says so in bold (``provenance_warnings``).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from posbench.core.files import PLAIN_NAME_ALLOWED, atomic_write_bytes, file_kind, is_plain_name, own_folder, refuse_links
from posbench.store.bounds import RowsError, open_regular, size_text
from posbench.store.meta import ENV_FILE, RUN_FILE, read_env, read_run_meta, run_command
from posbench.store.run_rows import ROWS_DIR

PUBLISHED = Path("results/published")
ROWS_FILE = "cases.jsonl"
MAX_RUN_BYTES = 4 * 2**20  # one run's rows and records
MAX_TOTAL_BYTES = 20 * 2**20  # every published run together


METHODS_DIR_FLAG = "--methods-dir"
OUTSIDE_PLACEHOLDER = "METHODS_DIR"  # what a page shows instead of a machine's methods folder


class PublishError(RowsError):
    """A run folder that cannot be published; the message names it and what is allowed."""


def _outside(folder: str) -> bool:
    """Whether a ``--methods-dir`` value names a folder outside the repository the run ran in:
    absolute, under a home folder, or climbing out with ``..`` (runs start at the repository root)."""
    if folder.startswith(("/", "~", "\\")) or (len(folder) > 1 and folder[1] == ":"):
        return True
    depth = 0
    for part in folder.replace("\\", "/").split("/"):
        depth += -1 if part == ".." else 0 if part in ("", ".") else 1
        if depth < 0:
            return True
    return False


def methods_dirs_of(command: list[str]) -> list[tuple[int, str]]:
    """``(index, folder)`` of every ``--methods-dir`` value in an argv (``--methods-dir DIR`` or
    ``--methods-dir=DIR``; ``index`` is where the value sits)."""
    out = []
    for i, arg in enumerate(command):
        if arg == METHODS_DIR_FLAG and i + 1 < len(command):
            out.append((i + 1, command[i + 1]))
        elif arg.startswith(METHODS_DIR_FLAG + "="):
            out.append((i, arg.split("=", 1)[1]))
    return out


def outside_methods_dirs(command: list[str]) -> list[str]:
    """The ``--methods-dir`` folders of ``command`` that lie outside the repository."""
    return [folder for _i, folder in methods_dirs_of(command) if _outside(folder)]


def without_machine_paths(command: list[str]) -> list[str]:
    """``command`` with each outside ``--methods-dir`` folder replaced by ``OUTSIDE_PLACEHOLDER``:
    a page never shows a folder of the machine that ran the run."""
    out = list(command)
    for i, folder in methods_dirs_of(command):
        if _outside(folder):
            out[i] = OUTSIDE_PLACEHOLDER if out[i] == folder else f"{METHODS_DIR_FLAG}={OUTSIDE_PLACEHOLDER}"
    return out


METHODS_PATH_KEY = "methods_path"  # env.json: the POSBENCH_METHODS_PATH folders of the run


def outside_methods_path(env: dict) -> list[str]:
    """The folders of env.json's ``methods_path`` (``POSBENCH_METHODS_PATH``) outside the repository."""
    folders = env.get(METHODS_PATH_KEY) if isinstance(env, dict) else None
    return [f for f in folders if isinstance(f, str) and _outside(f)] if isinstance(folders, list) else []


def provenance_warnings(env: dict, command: list[str]) -> list[str]:
    """What keeps a run from being reproduced from the repository alone, one sentence each (a page
    shows them in bold): a dirty tree, methods from outside the repository."""
    out = []
    if env.get("git_dirty"):
        out.append(
            "Run from a tree with uncommitted changes (env.json `git_dirty` true): its commit alone does not reproduce it."
        )
    outside = outside_methods_dirs(command)
    if outside:
        out.append(
            f"Methods from outside the repository ({len(outside)} `--methods-dir` folder(s) of the machine that ran it, "
            f"shown as `{OUTSIDE_PLACEHOLDER}`): the command reproduces it only with those method files."
        )
    if outside_methods_path(env):
        out.append(
            "Methods from outside the repository (`POSBENCH_METHODS_PATH` named a folder of the machine that ran it, "
            "env.json `methods_path`): the command reproduces it only with those method files."
        )
    return out


def check_provenance(run_dir: Path, allow_dirty: bool = False, allow_outside_methods: bool = False) -> None:
    """``PublishError`` (one line) for a run from a dirty tree or with methods from outside the
    repository, unless allowed."""
    env = read_env(run_dir)
    if not allow_dirty and env.get("git_dirty"):
        raise PublishError(
            f"{_shown(run_dir)}: env.json says git_dirty (run from a tree with uncommitted changes); allowed: a run from "
            "a clean commit, or --allow-dirty (its page then says so in bold)"
        )
    outside = outside_methods_dirs(run_command(run_dir))
    if outside and not allow_outside_methods:
        raise PublishError(
            f"{_shown(run_dir)}: run.json's command loads methods from outside the repository (--methods-dir "
            f"{_shown(Path(outside[0]))}); allowed: a --methods-dir inside the repository, or --allow-outside-methods "
            "(its page then says so in bold)"
        )
    from_env = outside_methods_path(env)
    if from_env and not allow_outside_methods:
        raise PublishError(
            f"{_shown(run_dir)}: env.json's methods_path says POSBENCH_METHODS_PATH named a folder outside the "
            f"repository ({_shown(Path(from_env[0]))}); allowed: methods from the repository, or --allow-outside-methods "
            "(its page then says so in bold)"
        )


def files_of(run_dir: Path) -> list[Path]:
    """The files ``publish`` copies from ``run_dir``, relative to it (rows first)."""
    out = [Path(ROWS_FILE)] if (run_dir / ROWS_FILE).exists() else []
    if (run_dir / ROWS_DIR).is_dir():
        out += sorted(p.relative_to(run_dir) for p in (run_dir / ROWS_DIR).glob("*.jsonl"))
    return out + [Path(name) for name in (RUN_FILE, ENV_FILE) if (run_dir / name).exists()]


def _read(path: Path, limit: int) -> bytes:
    fh = open_regular(path)  # a FIFO or a link is refused in one line (RowsError)
    if fh is None:
        raise PublishError(f"{path}: no such file")
    with fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise PublishError(f"{path}: over {size_text(limit)}; allowed: a run of at most {size_text(MAX_RUN_BYTES)} to publish")
    return data


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0


def _shown(path: Path) -> str:
    """``path`` for a one-line message: as it is, or quoted with escapes when it holds a newline or
    another character that is not printable."""
    text = str(path)
    return text if text.isprintable() else repr(text)


def _plain(name: str, what: str, where: Path) -> str:
    """``name`` when it is one plain path component (a suite's name rule); ``PublishError`` otherwise."""
    if not is_plain_name(name):  # a suite's name rule, for both parts of the destination
        raise PublishError(f"{_shown(where)}: {what} {name!r} is no plain name; allowed: {PLAIN_NAME_ALLOWED}")
    return name


def _real_folder(path: Path) -> None:
    """``PublishError`` when ``path`` is a link or something else than a folder (missing is fine):
    publish writes into no folder a link could send elsewhere."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise PublishError(
            f"{_shown(path)}: a symbolic link; publish does not write through links (allowed: a real folder; remove the link)"
        )
    if not stat.S_ISDIR(mode):
        raise PublishError(f"{_shown(path)}: {file_kind(mode)}, not a folder; allowed: a real folder (remove it)")


def run_id_of(run_dir: Path, root: Path) -> str:
    """The run id ``run_dir``'s copy is filed under: the name of the folder it resolves to
    (``RUN/checkpoints/..`` and ``.`` name the run, not the folder above it), one plain path
    component; a run folder at or inside ``root`` (a published copy, or ``root`` itself) refused."""
    resolved = run_dir.resolve()
    if resolved.is_relative_to(root.resolve()):
        raise PublishError(
            f"{_shown(run_dir)}: at or inside {_shown(root)}, where published runs live; allowed: a run folder outside {_shown(root)}"
        )
    return _plain(resolved.name, "the run folder's name", run_dir)


def destination(run_dir: Path, suite: str, run_id: str, root: Path) -> Path:
    """``root/<suite>/<run id>``, the suite checked to be one plain path component, and no link
    (nor file) on the way: ``root``, ``<suite>``, ``<run id>`` and its ``rows/``."""
    dest = root / _plain(suite, "run.json's suite", run_dir) / run_id
    for folder in (root, dest.parent, dest, dest / ROWS_DIR):
        _real_folder(folder)
    return dest


def _remove_stale(dest: Path, written: set[Path]) -> None:
    """Remove what an earlier copy of this run published and this one lacks: only names of the
    published file set (rows, run.json, env.json); any other file there is not publish's to delete."""
    for name in files_of(dest):
        if name not in written and ((dest / name).is_symlink() or (dest / name).is_file()):
            (dest / name).unlink()
    try:
        (dest / ROWS_DIR).rmdir()  # when the earlier copy's rows were its only files
    except OSError:
        pass


def publish(
    run_dir: str | Path, root: str | Path = PUBLISHED, allow_dirty: bool = False, allow_outside_methods: bool = False
) -> Path:
    """Copy ``run_dir``'s rows, run.json and env.json to ``root/<suite>/<run id>/`` (replacing an
    earlier copy of the same run, whose other published files go); return that folder. A run from
    a dirty tree or with methods from outside the repository is refused unless allowed."""
    run_dir, root = Path(run_dir), Path(root)
    if not run_dir.is_dir():
        raise PublishError(f"{_shown(run_dir)}: no such folder; allowed: a run folder, results/<suite>/<run-id>")
    run_id = run_id_of(run_dir, root)  # before any file of it is read
    refuse_links(run_dir)
    meta = read_run_meta(run_dir)
    if meta is None:
        raise PublishError(f"{_shown(run_dir)}: no {RUN_FILE}; a published run needs its record (re-run the suite)")
    check_provenance(run_dir, allow_dirty, allow_outside_methods)
    dest = destination(run_dir, meta.suite, run_id, root)
    files = files_of(run_dir)
    if not any(f.suffix == ".jsonl" for f in files):
        raise PublishError(f"{_shown(run_dir)}: no rows ({ROWS_FILE}); nothing to publish")
    data, left = {}, MAX_RUN_BYTES
    for name in files:
        data[name] = _read(run_dir / name, left)
        left -= len(data[name])
    total = _size(root) - _size(dest) + sum(map(len, data.values()))
    if total > MAX_TOTAL_BYTES:
        raise PublishError(
            f"{_shown(run_dir)}: publishing it takes {_shown(root)} to {size_text(total)}; allowed: at most "
            f"{size_text(MAX_TOTAL_BYTES)} in all (remove a run there that no page needs)"
        )
    for folder in (root, dest.parent, dest):
        own_folder(folder)  # made one level at a time, each checked again: no link to write through
    if any(name.parent != Path(".") for name in data):
        own_folder(dest / ROWS_DIR)
    for name, content in data.items():
        atomic_write_bytes(dest / name, content)
    _remove_stale(dest, set(data))
    return dest

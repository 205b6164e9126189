"""``bench.py publish RUN``: a run folder's rows and records copied into the repository, under
``results/published/<suite>/<run-id>/``, so that every docs/results page can be rebuilt from
committed rows and anyone can re-analyse them (as asv publishes its result JSON and MLPerf its logs).

Copied: ``cases.jsonl`` (or a launched sweep's ``rows/*.jsonl``), ``run.json`` and ``env.json``,
byte for byte. Never copied: checkpoints, TensorBoard event files (``cases/``), tables (rebuilt
from the rows), locks. A run of more than ``MAX_RUN_BYTES`` is refused, and so is one that would
take the published rows past ``MAX_TOTAL_BYTES``: a repository is no data store.
"""

from __future__ import annotations

from pathlib import Path

from posbench.core.files import atomic_write_bytes, refuse_links
from posbench.store.bounds import RowsError, open_regular, size_text
from posbench.store.meta import ENV_FILE, RUN_FILE, read_run_meta
from posbench.store.run_rows import ROWS_DIR

PUBLISHED = Path("results/published")
ROWS_FILE = "cases.jsonl"
MAX_RUN_BYTES = 4 * 2**20  # one run's rows and records
MAX_TOTAL_BYTES = 20 * 2**20  # every published run together


class PublishError(RowsError):
    """A run folder that cannot be published; the message names it and what is allowed."""


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


def publish(run_dir: str | Path, root: str | Path = PUBLISHED) -> Path:
    """Copy ``run_dir``'s rows, run.json and env.json to ``root/<suite>/<run id>/`` (replacing an
    earlier copy of the same run, whose other files go); return that folder."""
    run_dir, root = Path(run_dir), Path(root)
    if not run_dir.is_dir():
        raise PublishError(f"{run_dir}: no such folder; allowed: a run folder, results/<suite>/<run-id>")
    refuse_links(run_dir)
    meta = read_run_meta(run_dir)
    if meta is None:
        raise PublishError(f"{run_dir}: no {RUN_FILE}; a published run needs its record (re-run the suite)")
    files = files_of(run_dir)
    if not any(f.suffix == ".jsonl" for f in files):
        raise PublishError(f"{run_dir}: no rows ({ROWS_FILE}); nothing to publish")
    data, left = {}, MAX_RUN_BYTES
    for name in files:
        data[name] = _read(run_dir / name, left)
        left -= len(data[name])
    dest = root / meta.suite / run_dir.name
    if dest.resolve() == run_dir.resolve():
        raise PublishError(f"{run_dir}: already the published copy; allowed: a run folder outside {root}")
    total = _size(root) - _size(dest) + sum(map(len, data.values()))
    if total > MAX_TOTAL_BYTES:
        raise PublishError(
            f"{run_dir}: publishing it takes {root} to {size_text(total)}; allowed: at most "
            f"{size_text(MAX_TOTAL_BYTES)} in all (remove a run there that no page needs)"
        )
    for name, content in data.items():
        atomic_write_bytes(dest / name, content)
    for old in sorted(dest.rglob("*"), reverse=True):  # an earlier copy's files this one lacks
        if old.is_file() and old.relative_to(dest) not in data:
            old.unlink()
    return dest

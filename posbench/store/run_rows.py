"""The rows of a run folder (``cases.jsonl``, then a launched sweep's ``rows/<unit>.jsonl``), read
the one way resume, report and compare all read them.

A line that is not a row (``bounds.check_row``) is skipped with one warning naming file and
line, a torn last line silently; of several rows of a case and round the one started last counts
(``latest``); a case's rounds merge into one row (``merge_rounds``: metrics the medians of its ok
rounds, each round's values and windows beside them). docs/reports.md, docs/measuring-speed.md.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from posbench.store import bounds
from posbench.store.bounds import RowsError, check_row
from posbench.store.row import N_ROUNDS, set_by_window, set_rounds, windows

CASES_FILE = "cases.jsonl"
ROWS_DIR = "rows"  # a launched sweep's per-task rows files: rows/<unit>.jsonl


def warn(problem: str) -> None:
    """The one way a skipped line or row is told when the caller collects no ``problems``."""
    print(f"warning: {problem}", file=sys.stderr)


def read_rows(path: str | Path, problems: list[str] | None = None, check: Callable[[dict, str], Any] | None = None) -> list[dict]:
    """Every usable row of a ``cases.jsonl`` in file order (``[]`` when there is none yet).

    A line that is not UTF-8, not JSON, too long or deep, or not a row (``check_row``, then
    ``check(row, "file:line")``) is skipped with one warning in ``problems`` (printed when None); a
    torn last line silently. Anything but a regular file is a ``RowsError``."""
    path = Path(path)
    fh = bounds.open_regular(path)
    if fh is None:
        return []
    report = warn if problems is None else problems.append
    rows = []
    with fh:
        for lineno, raw, ended in bounds.lines(fh):
            if raw is not None and not raw.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                if raw is None:
                    raise RowsError(f"{where}: longer than {bounds.size_text(bounds.MAX_LINE)}; allowed: lines up to that")
                try:
                    text = str(raw, "utf-8")
                except UnicodeDecodeError:
                    if not ended:  # a write cut inside a multi-byte character
                        break
                    raise RowsError(f"{where}: not UTF-8 text") from None
                try:
                    row = bounds.loads(text)
                except ValueError as exc:
                    if not ended:  # a torn last line
                        break
                    raise RowsError(f"{where}: {exc}") from None
                check_row(row, where)
                if check is not None:
                    check(row, where)
                rows.append(row)
            except RowsError as exc:
                report(f"{exc}; line skipped")
    return rows


def rows_files(run_dir: str | Path) -> list[Path]:
    """The rows files of a run folder: ``cases.jsonl``, then ``rows/*.jsonl`` sorted by name. A
    ``rows`` that is a link is a ``RowsError`` (a run folder's links are never followed); a link
    or anything but a file inside it is left for ``read_rows`` to refuse by name."""
    run_dir = Path(run_dir)
    folder = run_dir / ROWS_DIR
    if folder.is_symlink():
        raise RowsError(f"{folder}: a symbolic link; posbench does not follow links in a run folder")
    try:
        names = sorted(e.name for e in os.scandir(folder) if e.name.endswith(".jsonl"))
    except (FileNotFoundError, NotADirectoryError):
        names = []
    return [run_dir / CASES_FILE] + [folder / n for n in names]


def read_run_rows(
    run_dir: str | Path, problems: list[str] | None = None, check: Callable[[dict, str], Any] | None = None
) -> list[dict]:
    """Every usable row of a run folder (``read_rows`` of each of ``rows_files``, in that order):
    the one reader of a run's rows, for resume, report and compare alike. Which row of a case
    counts is ``latest``'s rule (``started_at``), whichever file holds it."""
    rows: list[dict] = []
    for path in rows_files(run_dir):
        rows += read_rows(path, problems, check)
    return rows


def read_usable_rows(path: Path, problems: list[str] | None = None) -> list[dict]:
    """``read_rows`` for resuming: problems are collected in ``problems`` (none printed), so a
    damaged line costs its case a re-run, not the run."""
    return read_rows(path, [] if problems is None else problems)


def read_usable_run_rows(run_dir: Path, problems: list[str] | None = None) -> list[dict]:
    """``read_usable_rows`` of the whole run folder (``read_run_rows``)."""
    return read_run_rows(run_dir, [] if problems is None else problems)


def _order(row: dict) -> str:
    started = row.get("started_at")
    return started if isinstance(started, str) else ""


def latest(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``key(row)`` -> the latest row (the one started last; ties: read last), keys in first-seen
    order. Default key: the case id; reports use ``(run_id, case_id)``."""
    rows = list(rows)
    first_seen = {}
    for r in rows:
        first_seen.setdefault(key(r), len(first_seen))
    out: dict[Any, dict] = {}
    for r in sorted(rows, key=_order):  # stable: equal times keep the order read
        out[key(r)] = r
    return dict(sorted(out.items(), key=lambda kv: first_seen[kv[0]]))


def round_of(row: dict) -> int:
    """The row's round, 1-based; rows written before rounds existed are round 1 (``check_row``
    bounds it by ``bounds.MAX_ROUNDS``)."""
    r = row.get("round")
    return r if isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= bounds.MAX_ROUNDS else 1


def latest_rounds(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``(key(row), round)`` -> the latest row of that case and round (``latest`` per round)."""
    return latest(rows, key=lambda r: (key(r), round_of(r)))


def merge_rounds(rows: list[dict]) -> dict:
    """One row for a case from the latest row of each of its rounds. Status ``ok`` when every round
    is, else the first failed round's (message prefixed ``round r:``); ``info.paired: false`` when
    any round ran apart from the others (``posbench.run.schedule.joining``); a single row comes
    back as is."""
    if len(rows) == 1 and not group_of(rows[0]):
        return dict(rows[0])  # one round (or a row from before rounds): nothing to merge
    rows = sorted(rows, key=round_of)
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    out = dict(ok[0] if ok else rows[0])
    if any(_unpaired(r) for r in ok or rows) and not _unpaired(out):
        # a round timed apart (a join resumed unpaired): the case's values claim no pairing
        info = out.get("info")
        out["info"] = {**(info if isinstance(info, dict) else {}), "paired": False}
    if failed:
        first = failed[0]
        out.update(status=first["status"], message=first.get("message", ""), traceback=first.get("traceback", ""))
        if len(rows) > 1:
            out["message"] = f"round {round_of(first)}: {out['message']}"
    n = max(round_of(r) for r in rows)
    names = list(dict.fromkeys(k for r in ok for k in r["metrics"]))
    metrics, series = {}, dict(out.get("series") or {})
    for name in names:
        rounds: list = [None] * n
        for r in ok:
            value = _finite(r["metrics"].get(name))
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rounds[round_of(r) - 1] = value
        values = [v for v in rounds if v is not None]
        metrics[name] = _median(values) if values else None
        set_rounds(series, name, rounds)
    for name in names:  # paired windows: each round's windows, with the process they came from
        per_round: list = [None] * n
        for r in ok:
            values = windows(r.get("series"), name)
            if group_of(r) and isinstance(values, list):
                per_round[round_of(r) - 1] = {"group": group_of(r), "values": values}
        if any(per_round):
            set_by_window(series, name, per_round)
    if not ok:
        metrics = dict(out["metrics"])
    metrics[N_ROUNDS] = len(ok)
    out.update(metrics=metrics, series=series, round=None)
    if len(rows) > 1:
        out["duration_s"] = sum(float(r.get("duration_s") or 0) for r in rows)
    return out


def _unpaired(row: dict) -> bool:
    """Whether ``row`` ran apart from its grid point's other methods (``info.paired: false``)."""
    info = row.get("info")
    return isinstance(info, dict) and info.get("paired") is False


def group_of(row: dict) -> str | None:
    """The process (``info.group``) a paired-windows row was measured in; None for other rows."""
    info = row.get("info")
    if isinstance(info, dict) and info.get("pairing") == "windows" and isinstance(info.get("group"), str):
        return info["group"]
    return None


def _median(values: list):
    values = sorted(values)
    mid = len(values) // 2
    if len(values) % 2:
        return values[mid]
    return (values[mid - 1] + values[mid]) / 2


def case_rows(rows: Iterable[dict], key: Callable[[dict], Any] = lambda r: r["case_id"]) -> dict[Any, dict]:
    """``key(row)`` -> one merged row per case: the latest row of each round, then ``merge_rounds``."""
    groups: dict[Any, list] = {}
    for (k, _round), row in latest_rounds(rows, key).items():
        groups.setdefault(k, []).append(row)
    return {k: merge_rounds(group) for k, group in groups.items()}


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value

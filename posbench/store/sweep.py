"""A launched sweep's files in its run folder beside its record (``launch_record``): each
unit's ``rows/<unit>.jsonl``, ``.lock`` (held by the live task) and ``.done``, and submitit's
logs; the sweep as the folder holds it (``Sweep``) and the failure rows of a task that ended
without finishing (``Sweep.settle``). Which rows belong to a submission is its token in the rows'
``info`` (``of_submission``). docs/reliability.md.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from posbench.core.case import CaseSpec
from posbench.core.files import atomic_write_text, refuse_links
from posbench.core.nofollow import UnsafeFile, read_regular
from posbench.store.bounds import RowsError
from posbench.store.launch_record import JOB_ID, read_record, unit_file
from posbench.store.row import Result, make_row
from posbench.store.rows import ROWS_DIR, latest_rounds, read_run_rows
from posbench.store.writing import UnitLock, save_row

JOBS_DIR = "slurm"  # submitit's folder: sbatch scripts, pickles, logs (%j_%t_log.out/err)


def check_folder(run_dir: Path) -> None:
    """A run folder whose files the sweep machinery may write: not a link, nor holding one at
    its top, in ``rows/`` or ``slurm/`` (``UnsafeFile``, one line)."""
    if run_dir.is_symlink():
        raise UnsafeFile(f"{run_dir}: the run folder is a symbolic link; posbench does not follow links in a run "
                         "folder (allowed: the real folder)")
    for folder in (run_dir, run_dir / ROWS_DIR):
        refuse_links(folder)
    jobs = run_dir / JOBS_DIR
    if jobs.is_symlink():
        refuse_links(jobs)  # its one-line refusal of a linked folder
    if jobs.is_dir():
        # submitit links each array's .submission_file_<hash>.sh to its <job>_submission.sh beside
        # it: a link of its own making, inside the folder; any other link is refused.
        real = jobs.resolve()
        for entry in os.scandir(jobs):
            if entry.is_symlink() and not (entry.name.startswith(".submission_file_")
                                           and Path(os.path.realpath(entry.path)).parent == real):
                raise UnsafeFile(f"{jobs}: holds a symbolic link, {entry.name} -> {os.readlink(entry.path)}; posbench "
                                 "does not follow links in a run folder (allowed: regular files and submitit's own "
                                 "submission links; remove the link or pick another --run-id)")


def rows_path(run_dir: Path, key: str) -> Path:
    """``rows/<unit>.jsonl`` of the unit ``key``."""
    return run_dir / ROWS_DIR / f"{unit_file(key)}.jsonl"


def done_path(run_dir: Path, key: str) -> Path:
    """``rows/<unit>.done``: the unit's array task finished (JSON: its job id and when)."""
    return run_dir / ROWS_DIR / f"{unit_file(key)}.done"


def mark_done(run_dir: Path, key: str, job_id: str, at: str) -> None:
    atomic_write_text(done_path(run_dir, key), json.dumps({"job_id": job_id, "at": at}))


def finished(run_dir: Path, unit: dict) -> bool:
    """Whether this submission's task of ``unit`` wrote its ``.done``."""
    try:
        return bool(unit["job_id"]) and json.loads(str(read_regular(done_path(run_dir, unit["key"]), 1 << 16),
                                                        "utf-8")).get("job_id") == unit["job_id"]
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def log_tail(run_dir: Path, job_id: str, limit: int = 3000) -> str:
    """The end of the array task's stderr and stdout logs (submitit's ``%j_%t_log.err/out``)."""
    parts = []
    if not JOB_ID.fullmatch(job_id):  # checked by read_record too: a job id from data names no other file
        return ""
    for suffix in ("err", "out"):
        path = run_dir / JOBS_DIR / f"{job_id}_0_log.{suffix}"
        try:
            data = read_regular(path, 64 << 20)
        except (OSError, RowsError):
            continue
        parts.append(f"--- {path.name} ---\n" + str(data[-limit:], "utf-8", errors="replace"))
    return "\n".join(parts)


def of_submission(row: Optional[dict], unit: dict) -> bool:
    """Whether ``row`` was written for this submission of ``unit`` (its token in the row's ``info``,
    put there by the array task or by ``settle``). Never by comparing clocks: whole seconds, and a
    node's clock may run behind; only a record from before tokens has the clock to go by."""
    if row is None:
        return False
    token = unit.get("submission")
    if token is None:
        return str(row.get("started_at") or "") >= unit["submitted_at"]
    info = row.get("info")
    return isinstance(info, dict) and info.get("submission") == token


def missing(unit: dict, rows: dict) -> list[tuple[dict, int]]:
    """The unit's submitted (case JSON, round)s without a row of this submission in ``rows``
    ((case id, round) -> latest row)."""
    return [(case, rnd) for case, rnd in unit["todo"]
            if not of_submission(rows.get((CaseSpec.from_json(case).id, rnd)), unit)]


@dataclass(frozen=True)
class Sweep:
    """A launched sweep as its folder holds it at one moment, read once (``read``): the record,
    the latest row of each (case, round), and the units whose task wrote its ``.done``."""

    run_dir: Path
    record: dict
    rows: dict  # (case id, round) -> latest row
    done: frozenset  # unit keys
    landed: dict  # unit key -> [(case id, round, row)] of this submission, in the unit's order

    @classmethod
    def read(cls, run_dir: Path, warn: bool = False) -> Optional["Sweep"]:
        """The sweep ``launcher.json`` records (``of``); None when the run was never launched."""
        record = read_record(run_dir)
        return None if record is None else cls.of(run_dir, record, warn)

    @classmethod
    def of(cls, run_dir: Path, record: dict, warn: bool = False) -> "Sweep":
        """The sweep of ``record`` as the folder holds it now. ``warn``: skipped rows are printed."""
        done = frozenset(k for k, u in record["units"].items() if finished(run_dir, u))
        rows = latest_rounds(read_run_rows(run_dir, None if warn else []))
        landed = {key: [(cid, rnd, rows[(cid, rnd)]) for cid, rnd in
                        ((CaseSpec.from_json(case).id, rnd) for case, rnd in unit["todo"])
                        if of_submission(rows.get((cid, rnd)), unit)]
                  for key, unit in record["units"].items()}
        return cls(run_dir, record, rows, done, landed)

    def settle(self, unit: dict, status: str, message: str, info: dict, ask_lock: bool = False) -> bool:
        """A unit whose task looks ended: under its lock, taken without waiting, a ``status`` row
        (``message``, the log's tail as traceback, ``info``) per case still without a row of this
        submission. True when a live task holds the lock (nothing written); ``ask_lock``: asked even
        when no case is left."""
        left = missing(unit, self.rows)
        if not left and not ask_lock:
            return False
        try:
            lock = UnitLock(self.run_dir, unit["key"], wait=False)
        except OSError:
            if left:
                raise
            return False  # a lock that cannot be opened is held by no task (``unit_locked``)
        with lock:
            if not lock.held:  # the task is alive after all (its state was stale)
                return True
            now_rows = latest_rounds(read_run_rows(self.run_dir, []))  # as they are now that the task cannot write
            left = missing(unit, now_rows)
            if not left:
                return False
            result = Result(status, message, log_tail(self.run_dir, unit["job_id"]))
            now = datetime.now(timezone.utc)
            for case, rnd in left:
                row = make_row(CaseSpec.from_json(case), result, now, 0.0, self.record.get("commit", ""), rnd, info)
                save_row(rows_path(self.run_dir, unit["key"]), row)
        return False

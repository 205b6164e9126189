"""A launched sweep's files in its run folder: ``launcher.json`` (what was submitted: per unit its
array task's job id, a token naming the submission and the (case, round)s it runs, as case
JSON), each unit's ``rows/<unit>.jsonl``, ``.lock`` (held by the live task) and ``.done``, and
submitit's logs. Which rows belong to a submission is its token in the rows' ``info``
(``of_submission``), never a comparison of clocks.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from posbench.core.case import CaseSpec
from posbench.core.files import atomic_write_text, read_regular
from posbench.store.row import Result, make_row
from posbench.store.rows import ROWS_DIR, latest_rounds, read_run_rows
from posbench.store.writing import UnitLock, save_row

RECORD_FILE = "launcher.json"
JOBS_DIR = "slurm"  # submitit's folder: sbatch scripts, pickles, logs (%j_%t_log.out/err)


def read_record(run_dir: Path) -> Optional[dict]:
    """The run folder's ``launcher.json``, or None when the run was never launched."""
    try:
        data = read_regular(run_dir / RECORD_FILE, 64 << 20)
    except FileNotFoundError:
        return None
    record = json.loads(str(data, "utf-8"))
    return record if isinstance(record, dict) and isinstance(record.get("units"), dict) else None


def write_record(run_dir: Path, record: dict) -> None:
    atomic_write_text(run_dir / RECORD_FILE, json.dumps(record, indent=1) + "\n")


def rows_path(run_dir: Path, name: str) -> Path:
    return run_dir / ROWS_DIR / f"{name}.jsonl"


def done_path(run_dir: Path, name: str) -> Path:
    """``rows/<unit>.done``: the unit's array task finished (JSON: its job id and when)."""
    return run_dir / ROWS_DIR / f"{name}.done"


def mark_done(run_dir: Path, name: str, job_id: str, at: str) -> None:
    atomic_write_text(done_path(run_dir, name), json.dumps({"job_id": job_id, "at": at}))


def finished(run_dir: Path, unit: dict) -> bool:
    """Whether this submission's task of ``unit`` wrote its ``.done``."""
    try:
        return json.loads(str(read_regular(done_path(run_dir, unit["name"]), 1 << 16), "utf-8")).get("job_id") == unit["job_id"]
    except (OSError, ValueError, AttributeError):
        return False


def log_tail(run_dir: Path, job_id: str, limit: int = 3000) -> str:
    """The end of the array task's stderr and stdout logs (submitit's ``%j_%t_log.err/out``)."""
    parts = []
    for suffix in ("err", "out"):
        path = run_dir / JOBS_DIR / f"{job_id}_0_log.{suffix}"
        try:
            data = read_regular(path, 64 << 20)
        except OSError:
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

    def fail_left(self, unit: dict, status: str, message: str, info: dict) -> None:
        """A ``status`` row (``message``, the log's tail as traceback, ``info``) for each case of
        ``unit`` still without a row of this submission, written under the unit's lock (a live
        task holds it: then nothing is written)."""
        if not missing(unit, self.rows):
            return
        with UnitLock(self.run_dir, unit["name"], wait=False) as lock:
            if not lock.held:  # the task is alive after all (its state was stale)
                return
            now_rows = latest_rounds(read_run_rows(self.run_dir, []))  # as they are now that the task cannot write
            left = missing(unit, now_rows)
            result = Result(status, message, log_tail(self.run_dir, unit["job_id"]))
            now = datetime.now(timezone.utc)
            for case, rnd in left:
                row = make_row(CaseSpec.from_json(case), result, now, 0.0, self.record.get("commit", ""), rnd, info)
                save_row(rows_path(self.run_dir, unit["name"]), row)

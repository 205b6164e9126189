"""A launched sweep in its run folder: its record, ``launcher.json`` (per unit its array task's job
id, a token naming the submission and the (case, round)s it runs: ``unit_entry``), and its files
beside it: each unit's ``rows/<unit>.jsonl``, ``.lock`` (held by the live task) and ``.done``, and
submitit's logs. The record is data: read within bounds and checked key by key (``read_record``);
no file name is ever taken from it (``unit_file`` derives them from the unit key). The sweep as
the folder holds it is ``Sweep``, with the failure rows of a task that ended without finishing
(``Sweep.settle``); which rows belong to a submission is its token in the rows' ``info``
(``of_submission``). docs/reliability.md.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.core.files import atomic_write_text, refuse_links
from posbench.core.nofollow import UnsafeFile, read_regular
from posbench.store import bounds
from posbench.store.bounds import RowsError
from posbench.store.file_stems import file_stem, short_hash
from posbench.store.row import Result, make_row
from posbench.store.run_rows import ROWS_DIR, latest_rounds, read_run_rows
from posbench.store.writing import UnitLock, save_row

RECORD_FILE = "launcher.json"
JOBS_DIR = "slurm"  # submitit's folder: sbatch scripts, pickles, logs (%j_%t_log.out/err)


class RecordError(RowsError):
    """``launcher.json`` is unusable (not JSON, too deep, not UTF-8, a key missing or of the wrong
    type, a name that is not the unit's); ``str()`` is the one line to print."""


JOB_ID = re.compile(r"[0-9]{1,20}(_[0-9]{1,20})?")  # a Slurm (array) job id or a local PID; "" not yet started
TOKEN = re.compile(r"[0-9a-f]{1,64}")


def unit_file(key: str) -> str:
    """The unit's file name stem (``rows/<stem>.jsonl``): a safe function of its key, never read
    from ``launcher.json``."""
    return file_stem(key)


def row_mark(row: dict | None) -> str | None:
    """A short hash of a row (None for none): a (case, round)'s latest row at planning time, so a
    task can tell that another process ran the case since (``UnitTask`` then skips it)."""
    return None if row is None else short_hash(json.dumps(row, sort_keys=True, default=str))


@dataclass(frozen=True)
class Submission:
    """What every unit's entry of one launch shares: the run folder and id, the commit measured,
    the ``--methods-dir`` folders the tasks load, when, and who submitted (``sweep_state.submitter``)."""

    run_dir: Path
    run_id: str
    commit: str
    methods_dirs: list[str]
    submitted_at: str
    submitter: dict


def unit_entry(key: str, todo: list, planned: dict, now: dict, submission: Submission) -> dict | None:
    """A unit's entry in ``launcher.json`` as submitted (no job id yet), or None when nothing of it
    is left: its (case, round)s whose latest row is still the one the plan saw (``planned``; one
    that changed was run by another process meanwhile), the mark of each one's latest row ``now``
    (``over``: the task skips one that changed since), and a fresh token naming this submission."""
    todo = [(c, r) for c, r in todo if row_mark(now.get((c.id, r))) == row_mark(planned.get((c.id, r)))]
    if not todo:
        return None
    over = {f"{c.id}|{r}": row_mark(now.get((c.id, r))) for c, r in todo}
    return {
        "key": key,
        "name": unit_file(key),
        "run_dir": str(submission.run_dir.resolve()),
        "run_id": submission.run_id,
        "commit": submission.commit,
        "methods_dirs": submission.methods_dirs,
        "todo": [[c.to_json(), r] for c, r in todo],
        "over": over,
        "submitted_at": submission.submitted_at,
        "submission": uuid.uuid4().hex,
        "submitter": submission.submitter,
    }


def _bad(path: Path, where: str, what: str) -> RecordError:
    return RecordError(f"{path}: {where}: {what}; allowed: the launcher.json bench.py wrote (or remove it and launch again)")


def _check_case(path: Path, where: str, raw) -> None:
    if not isinstance(raw, dict):
        raise _bad(path, where, "expected a case object")
    for key in ("suite", "task", "method", "device", "profile", "run_id"):
        if not isinstance(raw.get(key), str):
            raise _bad(path, where, f"{key}: expected a string")
    if not isinstance(raw.get("params"), dict) or not isinstance(raw.get("settings"), dict):
        raise _bad(path, where, "params and settings: expected objects")
    try:
        CaseSpec.from_json(raw)
    except TypeError:
        raise _bad(path, where, "not a case (unknown or missing keys)") from None


def check_record(path: Path, record) -> dict:
    """``record`` checked key by key (``RecordError`` naming the first bad one), or returned."""
    if not isinstance(record, dict):
        raise _bad(path, "top level", f"expected an object, got {type(record).__name__}")
    units = record.get("units")
    if not isinstance(units, dict):
        raise _bad(path, "units", "missing or not an object")
    if record.get("launcher") not in ("slurm", "local") and units:
        raise _bad(path, "launcher", "expected slurm or local")
    command = record.get("command", [])
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        raise _bad(path, "command", "expected a list of strings")
    for key in ("commit", "device"):
        if not isinstance(record.get(key, ""), str):
            raise _bad(path, key, "expected a string")
    for key, unit in units.items():
        where = f"unit {key[:80]!r}"
        if not isinstance(unit, dict):
            raise _bad(path, where, "expected an object")
        if unit.get("key") != key:
            raise _bad(path, where, "key: expected the unit's own key")
        if unit.get("name") != unit_file(key):  # a name from data never becomes a path
            raise _bad(path, where, f"name: expected {unit_file(key)!r} (the unit's file name)")
        if not isinstance(unit.get("job_id"), str) or not (unit["job_id"] == "" or JOB_ID.fullmatch(unit["job_id"])):
            raise _bad(path, where, "job_id: expected a job id (digits, or digits_digits)")
        if unit.get("submission") is not None and not (
            isinstance(unit["submission"], str) and TOKEN.fullmatch(unit["submission"])
        ):
            raise _bad(path, where, "submission: expected a hex token or null")
        if not isinstance(unit.get("submitted_at"), str):
            raise _bad(path, where, "submitted_at: expected a string")
        todo = unit.get("todo")
        if not isinstance(todo, list):
            raise _bad(path, where, "todo: expected a list of [case, round]")
        for item in todo:
            if not (
                isinstance(item, list)
                and len(item) == 2
                and isinstance(item[1], int)
                and not isinstance(item[1], bool)
                and 1 <= item[1] <= bounds.MAX_ROUNDS
            ):
                raise _bad(path, where, "todo: expected a list of [case, round >= 1]")
            _check_case(path, f"{where}: todo", item[0])
    return record


def read_record(run_dir: Path) -> dict | None:
    """The run folder's ``launcher.json`` (bounded, checked: ``check_record``), or None when the
    run was never launched. Unusable: ``RecordError``, one line."""
    path = run_dir / RECORD_FILE
    data = bounds.read_small(path)
    if data is None:
        return None
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"{path}: not UTF-8 text; allowed: the launcher.json bench.py wrote") from None
    try:
        record = bounds.loads(text)
    except bounds.NotJson as exc:
        raise RecordError(f"{path}: {exc}; allowed: the launcher.json bench.py wrote") from None
    return check_record(path, record)


def write_record(run_dir: Path, record: dict) -> None:
    atomic_write_text(run_dir / RECORD_FILE, json.dumps(record, indent=1) + "\n")


def check_folder(run_dir: Path) -> None:
    """A run folder whose files the sweep machinery may write: not a link, nor holding one at
    its top, in ``rows/`` or ``slurm/`` (``UnsafeFile``, one line)."""
    if run_dir.is_symlink():
        raise UnsafeFile(
            f"{run_dir}: the run folder is a symbolic link; posbench does not follow links in a run "
            "folder (allowed: the real folder)"
        )
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
            if entry.is_symlink() and not (
                entry.name.startswith(".submission_file_") and Path(os.path.realpath(entry.path)).parent == real
            ):
                raise UnsafeFile(
                    f"{jobs}: holds a symbolic link, {entry.name} -> {os.readlink(entry.path)}; posbench "
                    "does not follow links in a run folder (allowed: regular files and submitit's own "
                    "submission links; remove the link or pick another --run-id)"
                )


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
        return (
            bool(unit["job_id"])
            and json.loads(str(read_regular(done_path(run_dir, unit["key"]), 1 << 16), "utf-8")).get("job_id") == unit["job_id"]
        )
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


def of_submission(row: dict | None, unit: dict) -> bool:
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
    return [(case, rnd) for case, rnd in unit["todo"] if not of_submission(rows.get((CaseSpec.from_json(case).id, rnd)), unit)]


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
    def read(cls, run_dir: Path, warn: bool = False) -> Sweep | None:
        """The sweep ``launcher.json`` records (``of``); None when the run was never launched."""
        record = read_record(run_dir)
        return None if record is None else cls.of(run_dir, record, warn)

    @classmethod
    def of(cls, run_dir: Path, record: dict, warn: bool = False) -> Sweep:
        """The sweep of ``record`` as the folder holds it now. ``warn``: skipped rows are printed."""
        done = frozenset(k for k, u in record["units"].items() if finished(run_dir, u))
        rows = latest_rounds(read_run_rows(run_dir, None if warn else []))
        landed = {
            key: [
                (cid, rnd, rows[(cid, rnd)])
                for cid, rnd in ((CaseSpec.from_json(case).id, rnd) for case, rnd in unit["todo"])
                if of_submission(rows.get((cid, rnd)), unit)
            ]
            for key, unit in record["units"].items()
        }
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

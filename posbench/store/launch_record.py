"""``launcher.json``, a launched sweep's record: per unit its array task's job id, a token naming
the submission and the (case, round)s it runs (``unit_entry``). It is data: read within bounds
and checked key by key (``read_record``); no file name is ever taken from it (``unit_file``
derives them from the unit key). docs/reliability.md.
"""
from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Optional

from posbench.core.case import CaseSpec
from posbench.core.files import atomic_write_text
from posbench.store import bounds
from posbench.store.bounds import RowsError
from posbench.store.names import file_stem, short_hash

RECORD_FILE = "launcher.json"


class RecordError(RowsError):
    """``launcher.json`` is unusable (not JSON, too deep, not UTF-8, a key missing or of the wrong
    type, a name that is not the unit's); ``str()`` is the one line to print."""


JOB_ID = re.compile(r"[0-9]{1,20}(_[0-9]{1,20})?")  # a Slurm (array) job id or a local PID; "" not yet started
TOKEN = re.compile(r"[0-9a-f]{1,64}")


def unit_file(key: str) -> str:
    """The unit's file name stem (``rows/<stem>.jsonl``): a safe function of its key, never read
    from ``launcher.json``."""
    return file_stem(key)


def row_mark(row: Optional[dict]) -> Optional[str]:
    """A short hash of a row (None for none): a (case, round)'s latest row at planning time, so a
    task can tell that another process ran the case since (``UnitTask`` then skips it)."""
    return None if row is None else short_hash(json.dumps(row, sort_keys=True, default=str))


def unit_entry(key: str, todo: list, planned: dict, now: dict, run_dir: Path, run_id: str, commit: str,
               methods_dirs: list[str], submitted_at: str, submitter: dict) -> Optional[dict]:
    """A unit's entry in ``launcher.json`` as submitted (no job id yet), or None when nothing of it
    is left: its (case, round)s whose latest row is still the one the plan saw (``planned``; one
    that changed was run by another process meanwhile), the mark of each one's latest row ``now``
    (``over``: the task skips one that changed since), and a fresh token naming this submission."""
    todo = [(c, r) for c, r in todo if row_mark(now.get((c.id, r))) == row_mark(planned.get((c.id, r)))]
    if not todo:
        return None
    over = {f"{c.id}|{r}": row_mark(now.get((c.id, r))) for c, r in todo}
    return {"key": key, "name": unit_file(key), "run_dir": str(run_dir.resolve()), "run_id": run_id, "commit": commit,
            "methods_dirs": methods_dirs, "todo": [[c.to_json(), r] for c, r in todo], "over": over,
            "submitted_at": submitted_at, "submission": uuid.uuid4().hex, "submitter": submitter}


def _bad(path: Path, where: str, what: str) -> RecordError:
    return RecordError(f"{path}: {where}: {what}; allowed: the launcher.json bench.py wrote (or remove it and "
                       "launch again)")


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
        if unit.get("submission") is not None and not (isinstance(unit["submission"], str)
                                                       and TOKEN.fullmatch(unit["submission"])):
            raise _bad(path, where, "submission: expected a hex token or null")
        if not isinstance(unit.get("submitted_at"), str):
            raise _bad(path, where, "submitted_at: expected a string")
        todo = unit.get("todo")
        if not isinstance(todo, list):
            raise _bad(path, where, "todo: expected a list of [case, round]")
        for item in todo:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], int)
                    and not isinstance(item[1], bool) and 1 <= item[1] <= bounds.MAX_ROUNDS):
                raise _bad(path, where, "todo: expected a list of [case, round >= 1]")
            _check_case(path, f"{where}: todo", item[0])
    return record


def read_record(run_dir: Path) -> Optional[dict]:
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

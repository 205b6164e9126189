"""A launched sweep's units in the store: a unit's entry in ``launcher.json`` (``unit_entry``),
the one call a unit that settles a task that ended (``Sweep.settle``), and when the unit's lock
has the last word on a task's state (``lock_may_tell``, ``busy_units``)."""

import json
from datetime import datetime, timezone
from pathlib import Path

from posbench.core import files, nofollow
from posbench.core.case import CaseSpec
from posbench.run.sweep_state import JobState, busy_units, lock_may_tell
from posbench.store.launched_sweep import (
    Submission,
    Sweep,
    check_record,
    done_path,
    row_mark,
    rows_path,
    unit_entry,
    unit_file,
    write_record,
)
from posbench.store.row import Result, make_row
from posbench.store.run_rows import read_run_rows
from posbench.store.writing import UnitLock

NO_PID = "4194303"  # above the default pid_max: no such process
TOKEN = "ab" * 16


def _case(n: int) -> CaseSpec:
    return CaseSpec(
        suite="t", task="_testing", method="alibi", params={"n": n}, settings={}, device="cpu", profile="default", run_id="r"
    )


def _row(case: CaseSpec, status: str = "ok", submission: str = TOKEN) -> dict:
    return make_row(case, Result(status), datetime.now(timezone.utc), 0.0, "abc", 1, {"submission": submission})


def _folder(tmp_path: Path, cases=(1, 2), job_id: str = NO_PID) -> tuple[Path, dict]:
    """A run folder with one local unit ``u`` of ``cases`` (its task long gone), no rows."""
    run_dir = tmp_path / "run"
    (run_dir / "rows").mkdir(parents=True)
    unit = {
        "key": "u",
        "name": unit_file("u"),
        "run_dir": str(run_dir),
        "run_id": "r",
        "commit": "abc",
        "methods_dirs": [],
        "todo": [[_case(n).to_json(), 1] for n in cases],
        "over": {},
        "submitted_at": "2026-01-01T00:00:00+00:00",
        "submission": TOKEN,
        "job_id": job_id,
    }
    record = {
        "format": 1,
        "units": {"u": unit},
        "launcher": "local",
        "command": [],
        "commit": "abc",
        "device": "cpu",
        "folder": "slurm",
    }
    write_record(run_dir, record)
    return run_dir, record


def test_settle_writes_a_failure_row_for_each_case_left_and_only_those(tmp_path):
    run_dir, record = _folder(tmp_path)
    rows = rows_path(run_dir, "u")
    rows.write_text(json.dumps(_row(_case(1))) + "\n")
    info = {"unit": "u", "job_id": NO_PID, "job_state": "ENDED", "submission": TOKEN}
    assert Sweep.of(run_dir, record).settle(record["units"]["u"], "timeout", "it ended", info) is False
    written = read_run_rows(run_dir)
    assert [(r["case_id"], r["status"]) for r in written] == [("alibi/n=1", "ok"), ("alibi/n=2", "timeout")]
    assert written[1]["message"] == "it ended" and written[1]["info"] == info
    # Every case has a row of this submission now: a second call writes nothing.
    assert Sweep.of(run_dir, record).settle(record["units"]["u"], "error", "again", info) is False
    assert len(read_run_rows(run_dir)) == 2


def test_settle_writes_nothing_while_a_live_task_holds_the_unit_lock(tmp_path):
    run_dir, record = _folder(tmp_path)
    unit, info = record["units"]["u"], {"submission": TOKEN}
    with UnitLock(run_dir, "u"):  # the task (another open file: flock refuses a second one)
        assert Sweep.of(run_dir, record).settle(unit, "error", "gone?", info) is True
        assert Sweep.of(run_dir, record).settle(unit, "error", "gone?", info, ask_lock=True) is True
    assert read_run_rows(run_dir) == []
    for case in (_case(1), _case(2)):  # nothing left: the lock is asked only when ask_lock says so
        with rows_path(run_dir, "u").open("a") as fh:
            fh.write(json.dumps(_row(case)) + "\n")
    with UnitLock(run_dir, "u"):
        assert Sweep.of(run_dir, record).settle(unit, "error", "gone?", info) is False
        assert Sweep.of(run_dir, record).settle(unit, "error", "gone?", info, ask_lock=True) is True
    assert Sweep.of(run_dir, record).settle(unit, "error", "gone?", info, ask_lock=True) is False


def test_settle_opens_no_lock_when_nothing_is_left_and_the_lock_is_not_asked(tmp_path):
    run_dir, record = _folder(tmp_path, cases=(1,))
    rows_path(run_dir, "u").write_text(json.dumps(_row(_case(1))) + "\n")
    assert Sweep.of(run_dir, record).settle(record["units"]["u"], "error", "x", {}) is False
    assert not (run_dir / "rows" / f"{unit_file('u')}.lock").exists()


def test_the_lock_has_the_last_word_only_for_a_local_or_unstarted_task_that_looks_ended():
    local, slurm = {"launcher": "local"}, {"launcher": "slurm"}
    started, unstarted = {"job_id": "12"}, {"job_id": ""}
    assert lock_may_tell(local, started, JobState("ENDED"))
    assert lock_may_tell(slurm, unstarted, JobState("NOT_STARTED"))
    assert lock_may_tell(local, unstarted, JobState("NOT_STARTED"))
    assert not lock_may_tell(slurm, started, JobState("CANCELLED"))  # Slurm's word stands
    assert not lock_may_tell(local, started, JobState("RUNNING"))
    assert not lock_may_tell(local, unstarted, JobState("WAITING"))
    assert not lock_may_tell(local, started, JobState("COMPLETED", "0:0"))  # done: finished, whoever holds it


def test_busy_units_asks_the_lock_of_a_task_whose_process_is_gone_but_not_of_a_finished_one(tmp_path):
    run_dir, _record = _folder(tmp_path)
    assert busy_units(run_dir) == []
    with UnitLock(run_dir, "u"):
        assert busy_units(run_dir) == [("u", NO_PID)]
        # The task wrote its .done, still holding the lock as it exits: finished, not busy.
        done_path(run_dir, "u").write_text(json.dumps({"job_id": NO_PID, "at": "2026-01-01T00:00:09+00:00"}))
        assert busy_units(run_dir) == []


def test_a_unit_entry_keeps_what_the_plan_saw_and_marks_each_latest_row(tmp_path):
    one, two, three = _case(1), _case(2), _case(3)
    planned = {(one.id, 1): _row(one, "error")}
    now = {(one.id, 1): planned[(one.id, 1)], (two.id, 1): _row(two)}  # two was run meanwhile
    args = (tmp_path, "r", "abc", ["/m"], "2026-01-01T00:00:00+00:00", {"pid": 1, "host": "h", "start": "5"})
    entry = unit_entry("n=1", [(one, 1), (two, 1), (three, 1)], planned, now, Submission(*args))
    assert entry["key"] == "n=1" and entry["name"] == unit_file("n=1") and entry["run_dir"] == str(tmp_path.resolve())
    assert entry["todo"] == [[one.to_json(), 1], [three.to_json(), 1]]
    assert entry["over"] == {f"{one.id}|1": row_mark(planned[(one.id, 1)]), f"{three.id}|1": None}
    assert (entry["run_id"], entry["commit"], entry["methods_dirs"]) == ("r", "abc", ["/m"])
    assert entry["submitted_at"] == args[4] and entry["submitter"] == args[5] and len(entry["submission"]) == 32
    assert (
        unit_entry("n=1", [(one, 1), (two, 1), (three, 1)], planned, now, Submission(*args))["submission"] != entry["submission"]
    )
    record = {"format": 1, "units": {"n=1": dict(entry, job_id="")}, "launcher": "local"}
    assert check_record(tmp_path / "launcher.json", record) is record  # what it writes, it reads back
    assert unit_entry("n=1", [(two, 1)], planned, now, Submission(*args)) is None  # nothing left of the unit


def test_core_files_still_exports_the_names_that_moved_to_nofollow():
    for name in ("UnsafeFile", "open_nofollow", "read_regular", "file_kind"):
        assert getattr(files, name) is getattr(nofollow, name)

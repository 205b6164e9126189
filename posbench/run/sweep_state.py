"""Where a launched sweep stands: its record, each array task's state, rows for tasks that died.

``launcher.json`` in the run folder records what was submitted: the launcher (``slurm`` or
``local``), the command, and per unit (``posbench.run.units``) the job id of its array task, when
it was submitted, a token naming that submission and the (case, round)s it runs (as case JSON, so
a row can be written for a case whose task died). A resubmission replaces the entries of the units
it submits again. Which rows belong to a submission is its token in the rows' ``info``
(``of_submission``), never a comparison of clocks.

A task's state is asked of the scheduler without trusting anything a job left behind: Slurm's
``squeue``, then ``scontrol show job`` (kept a few minutes after the end), then ``sacct`` (where
accounting runs); a local task is its controller process. A task that finished writes
``rows/<unit>.done`` (JSON). A task that ended without it (cancelled, killed, out of time or
memory, its node lost) gets, for each of its cases without a row, an ``error`` / ``timeout`` /
``oom`` row naming the job's state, exit code and the tail of its log (``settle``): nothing is
read back from submitit's pickles, since data never runs code.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from posbench.core.case import CaseSpec
from posbench.core.files import atomic_write_text, open_nofollow, read_regular
from posbench.report.rows import ROWS_DIR, latest_rounds, read_run_rows
from posbench.run.folder import make_row, save_row

RECORD_FILE = "launcher.json"
JOBS_DIR = "slurm"  # submitit's folder: sbatch scripts, pickles, logs (%j_%t_log.out/err)
ACTIVE = {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING",
          "SUSPENDED", "STAGE_OUT", "SIGNALING", "RESV_DEL_HOLD", "STOPPED"}
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"}
STATUS_OF_STATE = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}
FAILED_STATUSES = ("error", "timeout", "oom")


@dataclass
class JobState:
    state: str  # Slurm's word (RUNNING, CANCELLED, ...), or COMPLETED / ENDED for a local task
    exit_code: str = ""
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


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


class UnitLock:
    """flock on ``rows/<unit>.lock``: held by the array task while it runs, so nobody writes
    failure rows for a task that is alive. ``wait`` False: ``held`` says whether it was taken."""

    def __init__(self, run_dir: Path, name: str, wait: bool = True):
        (run_dir / ROWS_DIR).mkdir(parents=True, exist_ok=True)
        self.fd = open_nofollow(run_dir / ROWS_DIR / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            self.held = True
        except BlockingIOError:
            self.held = False

    def __enter__(self) -> "UnitLock":
        return self

    def __exit__(self, *exc) -> None:
        os.close(self.fd)


def _run(cmd: list[str]) -> Optional[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def slurm_state(job_id: str) -> JobState:
    """``squeue``, then ``scontrol show job``, then ``sacct``: the first that knows the job."""
    out = _run(["squeue", "-h", "-j", job_id, "-o", "%T|%r"])
    if out and out.strip():
        state, _, reason = out.strip().splitlines()[0].partition("|")
        return JobState(state, reason=reason if reason not in ("None", "(null)") else "")
    out = _run(["scontrol", "-o", "show", "job", job_id])
    if out:
        fields = dict(re.findall(r"(\w+)=(\S*)", out))
        if "JobState" in fields:
            reason = fields.get("Reason", "")
            return JobState(fields["JobState"], fields.get("ExitCode", ""), "" if reason == "None" else reason)
    out = _run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,ExitCode"])
    if out and out.strip():
        state, _, code = out.strip().splitlines()[-1].partition("|")
        return JobState(state.split()[0], code)
    return JobState("GONE", reason="the scheduler no longer knows the job")


def local_state(job_id: str) -> JobState:
    """A local task: its controller process (``python -m submitit.local._local``) alive or not."""
    try:
        cmdline = Path(f"/proc/{int(job_id)}/cmdline").read_bytes()
    except (OSError, ValueError):
        return JobState("ENDED", reason="the local task's process is gone")
    if b"submitit" in cmdline:
        # A zombie (the submitter still holds it, not yet reaped) has ended too.
        stat = Path(f"/proc/{int(job_id)}/stat").read_text().rsplit(")", 1)[-1].split()
        return JobState("RUNNING") if stat[0] != "Z" else JobState("ENDED", reason="the local task ended")
    return JobState("ENDED", reason="the local task's process is gone")


def job_state(record: dict, run_dir: Path, unit: dict) -> JobState:
    """The state of a unit's array task (COMPLETED once it wrote ``rows/<unit>.done``)."""
    done = run_dir / ROWS_DIR / f"{unit['name']}.done"
    try:
        if json.loads(str(read_regular(done, 1 << 16), "utf-8")).get("job_id") == unit["job_id"]:
            return JobState("COMPLETED", "0:0")
    except (OSError, ValueError, AttributeError):
        pass
    return (slurm_state if record["launcher"] == "slurm" else local_state)(unit["job_id"])


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
    """Whether ``row`` was written for this submission of ``unit``: by its array task (or the same
    task requeued) or by ``settle`` for it, both of which put the submission's token in the row's
    ``info``.

    Not ``started_at >= submitted_at``: both are whole seconds, so a failure row that ``settle``
    wrote in the same second as the resubmission (``status``, then the resubmit command at once, as
    a script or a test does) read as the new task's own row; the task then skipped that case as
    done, and ``status`` said failed. Nor would a clock comparison survive a node whose clock runs
    behind the submitter's. A record written before tokens existed has only the clock to go by."""
    if row is None:
        return False
    token = unit.get("submission")
    if token is None:
        return str(row.get("started_at") or "") >= unit["submitted_at"]
    info = row.get("info")
    return isinstance(info, dict) and info.get("submission") == token


def missing(run_dir: Path, unit: dict, rows: Optional[dict] = None) -> list[tuple[dict, int]]:
    """The unit's submitted (case JSON, round)s without a row of this submission (``of_submission``)."""
    latest = latest_rounds(read_run_rows(run_dir, [])) if rows is None else rows
    return [(case, rnd) for case, rnd in unit["todo"]
            if not of_submission(latest.get((CaseSpec.from_json(case).id, rnd)), unit)]


def settle(run_dir: Path, record: dict) -> dict[str, JobState]:
    """Each unit's state; for a task that ended without finishing, a failure row per case it left
    without one (written under the unit's lock, which a live task holds)."""
    states: dict[str, JobState] = {}
    rows = latest_rounds(read_run_rows(run_dir, []))
    for key, unit in record["units"].items():
        state = states[key] = job_state(record, run_dir, unit)
        if state.active or state.state == "COMPLETED":
            continue
        left = missing(run_dir, unit, rows)
        if not left:
            continue
        with UnitLock(run_dir, unit["name"], wait=False) as lock:
            if not lock.held:  # the task is alive after all (its state was stale)
                continue
            fail_cases(run_dir, record, unit, state, missing(run_dir, unit))
    return states


def fail_cases(run_dir: Path, record: dict, unit: dict, state: JobState, left: list[tuple[dict, int]]) -> None:
    code = f", exit code {state.exit_code}" if state.exit_code else ""
    why = f" ({state.reason})" if state.reason else ""
    result = {"status": STATUS_OF_STATE.get(state.state, "error"),
              "message": f"{record['launcher']} array task {unit['job_id']} (unit {unit['key']}) ended {state.state}"
                         f"{code}{why} before this case finished; resubmit: bench.py status {run_dir}",
              "traceback": log_tail(run_dir, unit["job_id"])}
    now = datetime.now(timezone.utc)
    for case, rnd in left:
        row = make_row(CaseSpec.from_json(case), result, now, 0.0, record.get("commit", ""), rnd)
        row["info"] = {"unit": unit["key"], "job_id": unit["job_id"], "job_state": state.state,
                       "submission": unit.get("submission")}
        save_row(rows_path(run_dir, unit["name"]), row)


def unit_status(state: JobState, unit: dict, rows: dict) -> tuple[str, int]:
    """(queued | running | done | failed, cases of the unit with a row)."""
    todo = unit["todo"]
    have = [rows.get((CaseSpec.from_json(c).id, r)) for c, r in todo]
    n = sum(1 for row in have if of_submission(row, unit))
    bad = any(row is not None and row["status"] in FAILED_STATUSES for row in have)
    if state.active and not (n == len(todo) and not bad):
        # (a task whose every case has an ok row is done, though its process may still be exiting:
        # the scheduler reads RUNNING for a moment after the last row is written)
        return ("queued" if state.state in QUEUED else "running"), n
    return ("failed" if bad or n < len(todo) else "done"), n

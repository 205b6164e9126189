"""Where a launched sweep stands: each array task's state, asked of the scheduler, and failure
rows for tasks that died (its files: ``posbench.store.launched_sweep``).

A task's state comes from Slurm's ``squeue``, then ``scontrol show job`` (kept a few minutes after
the end), then ``sacct``; a local task is its controller process, or whoever holds its unit's
lock (the task itself, when a wrapper died). A unit recorded but not started yet (no job id) is
WAITING while its submitter lives, NOT_STARTED after. A task that ended without its
``.done`` gets, for each of its cases without a row, an ``error`` / ``timeout`` / ``oom`` row
naming the job's state, exit code and the tail of its log (``settle``): nothing is read back
from submitit's pickles, since data never runs code.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.store.launched_sweep import Sweep, check_folder, of_submission, read_record
from posbench.store.writing import unit_locked

ACTIVE = {
    "PENDING",
    "RUNNING",
    "CONFIGURING",
    "COMPLETING",
    "REQUEUED",
    "REQUEUE_HOLD",
    "REQUEUE_FED",
    "RESIZING",
    "SUSPENDED",
    "STAGE_OUT",
    "SIGNALING",
    "RESV_DEL_HOLD",
    "STOPPED",
    "WAITING",
}
QUEUED = {"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD", "WAITING"}
STATUS_OF_STATE = {"TIMEOUT": "timeout", "DEADLINE": "timeout", "OUT_OF_MEMORY": "oom"}
FAILED_STATUSES = ("error", "timeout", "oom")


@dataclass(frozen=True)
class JobState:
    state: str  # Slurm's word (RUNNING, CANCELLED, ...), or COMPLETED / ENDED for a local task
    exit_code: str = ""
    reason: str = ""

    @property
    def active(self) -> bool:
        return self.state in ACTIVE


def _run(cmd: list[str]) -> str | None:
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


def _start_time(pid: int) -> str:
    """A process's start time in clock ticks (``/proc/<pid>/stat``), "" when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[19]
    except (OSError, IndexError):
        return ""


def submitter() -> dict:
    """This process as a unit's ``submitter`` in ``launcher.json`` (it starts the units still WAITING)."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "start": _start_time(os.getpid())}


def submitter_alive(unit: dict) -> bool:
    """Whether the process that recorded ``unit`` (and starts it) still runs."""
    who = unit.get("submitter")
    if not isinstance(who, dict) or who.get("host") != socket.gethostname() or not isinstance(who.get("pid"), int):
        return False
    return bool(who.get("start")) and _start_time(who["pid"]) == who.get("start")


def lock_may_tell(record: dict, unit: dict, state: JobState) -> bool:
    """Whether a task that looks ended without finishing may still run: a local task whose
    process is gone, or one never started, is alive while it holds its unit's lock (Slurm's word
    is taken as it is)."""
    return not state.active and state.state != "COMPLETED" and (not unit["job_id"] or record["launcher"] != "slurm")


HOLDS_LOCK = JobState("RUNNING", reason="its task holds the unit's lock")


def job_state(record: dict, unit: dict, done: bool) -> JobState:
    """A unit's array task as the scheduler (or the local task's process) tells it; COMPLETED once
    it wrote ``rows/<unit>.done`` (``done``). Where ``lock_may_tell``, its unit's lock has the last word."""
    if done:
        return JobState("COMPLETED", "0:0")
    if not unit["job_id"]:
        if submitter_alive(unit):
            return JobState("WAITING", reason="recorded; its submitter starts it as a slot frees")
        return JobState("NOT_STARTED", reason="the submitter ended before starting this task")
    if record["launcher"] == "slurm":
        return slurm_state(unit["job_id"])
    return local_state(unit["job_id"])


def busy_units(run_dir: Path) -> list[tuple[str, str]]:
    """(unit key, job id) of a launch's tasks that may still run in ``run_dir`` (queued, running,
    waiting for their submitter, holding their lock): a plain run there would run their cases too."""
    record = read_record(run_dir)
    if record is None:
        return []
    sweep = Sweep.of(run_dir, record)
    busy = []
    for key, unit in record["units"].items():
        state = job_state(record, unit, key in sweep.done)
        if state.active or (lock_may_tell(record, unit, state) and unit_locked(run_dir, key)):
            busy.append((key, unit["job_id"]))
    return busy


def settle(run_dir: Path, record: dict) -> dict[str, JobState]:
    """Each unit's state (``settled``'s)."""
    return settled(Sweep.of(run_dir, record))[0]


def settled(sweep: Sweep, warn: bool = False) -> tuple[dict[str, JobState], Sweep]:
    """Each unit's state (``settle_units``), and the sweep read again after asking: a row that
    landed meanwhile is not missed. ``warn``: that read prints the rows files' skipped lines."""
    states = settle_units(sweep)
    return states, Sweep.of(sweep.run_dir, sweep.record, warn)


def settle_units(sweep: Sweep) -> dict[str, JobState]:
    """Each unit's state; for a task that ended without finishing, a failure row per case it left
    without one (``Sweep.settle``, one call a unit)."""
    states: dict[str, JobState] = {}
    for key, unit in sweep.record["units"].items():
        state = states[key] = job_state(sweep.record, unit, key in sweep.done)
        if state.active or state.state == "COMPLETED":
            continue
        code = f", exit code {state.exit_code}" if state.exit_code else ""
        why = f" ({state.reason})" if state.reason else ""
        message = (
            f"{sweep.record['launcher']} array task {unit['job_id'] or '(not started)'} (unit {unit['key']}) ended "
            f"{state.state}{code}{why} before this case finished; resubmit: bench.py status {sweep.run_dir}"
        )
        info = {"unit": unit["key"], "job_id": unit["job_id"], "job_state": state.state, "submission": unit.get("submission")}
        tell = lock_may_tell(sweep.record, unit, state)
        if sweep.settle(unit, STATUS_OF_STATE.get(state.state, "error"), message, info, ask_lock=tell) and tell:
            states[key] = HOLDS_LOCK
    return states


UnitLine = tuple[str, dict, JobState, str, int]  # (key, unit, state, queued|running|done|failed, cases with a row)


def status(run_dir: Path) -> tuple[dict, list[UnitLine]] | None:
    """``(record, units_of(...))`` of the sweep as its folder holds it, failure rows written
    first (``settled``); None when the run was never launched."""
    check_folder(run_dir)  # no link followed, before anything is read or written
    sweep = Sweep.read(run_dir)
    if sweep is None:
        return None
    states, sweep = settled(sweep, warn=True)
    return sweep.record, units_of(sweep, states)


def units_of(sweep: Sweep, states: dict[str, JobState]) -> list[UnitLine]:
    """Per unit of a settled sweep: ``(key, unit, state, queued|running|done|failed, cases with a row)``."""
    return [(key, unit, states[key], *unit_status(states[key], unit, sweep.rows)) for key, unit in sweep.record["units"].items()]


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

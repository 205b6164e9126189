"""A sweep as one job array through submitit: ``--launcher slurm`` (or ``local``). Needs
``pip install posbench[slurm]``.

``submit`` plans under the run folder's lock (``schedule.plan_run``), submits an array task per
unit and records it in ``launcher.json``; ``follow`` reports rows as they land until every task
ended. Each task (``UnitTask``) runs its unit's jobs as a local run does, into its own
``rows/<unit>.jsonl``; a requeued task skips what has a row. docs/many-gpus.md.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.core.files import WriteError
from posbench.core.nofollow import open_nofollow
from posbench.core.outcome import PosbenchError
from posbench.run import sweep_state as state
from posbench.run.launch import PACKAGE_ROOT
from posbench.run.machine import clean_stale_temp_dirs
from posbench.run.options import RunOptions, run_folder
from posbench.run.schedule import jobs, plan_run
from posbench.run.suite import Suite
from posbench.run.units import Unit
from posbench.store import launched_sweep
from posbench.store.meta import write_run_meta
from posbench.store.row import make_row
from posbench.store.run_rows import ROWS_DIR, latest_rounds, read_run_rows
from posbench.store.writing import UnitLock, lock_run_dir, save_row, write_env

# How often the follower looks at the rows and asks the scheduler (squeue) about the tasks.
POLL_S = {"local": 1.0, "slurm": 10.0}


class LauncherError(PosbenchError):
    """submitit missing, or a submission refused; ``str()`` is the one line to print."""


def _submitit():
    try:
        import submitit
    except ImportError:
        raise LauncherError(
            "--launcher needs submitit; allowed: pip install 'posbench[slurm]' (or pip install submitit), or leave --launcher out"
        ) from None
    return submitit


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")  # as rows' started_at


class UnitTask:
    """One array task: the unit's (case, round)s still without a row of this submission, rows into
    ``rows/<unit>.jsonl``, ``rows/<unit>.done`` at the end. Requeued as it is (``checkpoint``)."""

    def __call__(self, spec: dict) -> dict:
        from posbench.run.runner import Workers, ask_unavailable, run_jobs

        run_dir, key = Path(spec["run_dir"]), spec["key"]
        job_id = _job_id()
        # Slurm's SIGTERM (scancel, preemption, the time limit) reaches the worker too: what it
        # then reports is the job's end, not the case's, so no row is written for it and no
        # further job starts; the requeued task runs it again, or ``settle`` writes the row
        # with the job's state.
        terminating = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: terminating.set())
        launched_sweep.check_folder(run_dir)
        with UnitLock(run_dir, key):  # a requeued twin waits here; failure rows are not written meanwhile
            record = launched_sweep.read_record(run_dir)
            if record is None or (record["units"].get(key) or {}).get("submission") != spec.get("submission"):
                return {"unit": key, "ran": 0}  # a later submission took this unit over: it runs it
            rows = latest_rounds(read_run_rows(run_dir, []))
            left = {(CaseSpec.from_json(c).id, r) for c, r in launched_sweep.missing(spec, rows)}
            over = spec.get("over")  # (None: submitted before marks were recorded)
            # A (case, round) whose latest row changed since the submitter planned was run by
            # someone else meanwhile (a task finishing, a plain run): not run again.
            todo = [
                (case, r)
                for case, r in ((CaseSpec.from_json(c), r) for c, r in spec["todo"])
                if (case.id, r) in left
                and (over is None or launched_sweep.row_mark(rows.get((case.id, r))) == over.get(f"{case.id}|{r}"))
            ]
            info = {
                "unit": key,
                "job_id": job_id,
                "host": socket.gethostname(),
                "submission": spec.get("submission"),
            }  # which rows are this submission's (sweep_state)
            path = launched_sweep.rows_path(run_dir, key)

            def emit(case, result, started, duration, rnd):
                if terminating.is_set() and result["status"] != "ok":
                    return
                save_row(path, make_row(case, result, started, duration, spec["commit"], rnd, info))

            # Asked once by the submitter (method files are user code, asked in a child there).
            answers = spec.get("answers")
            if answers is None:
                answers = ask_unavailable([c for c, _r in todo], spec["methods_dirs"])
            run_jobs(jobs(todo), Workers(run_dir, spec["run_id"], answers), emit, stopped=terminating)
            if terminating.is_set():
                return {"unit": key, "ran": None}
            launched_sweep.mark_done(run_dir, key, job_id, _now())
        return {"unit": key, "ran": len(todo)}

    def checkpoint(self, spec: dict):
        """Preemption or the time limit: submitit requeues this same task (it resumes)."""
        return _submitit().helpers.DelayedSubmission(self, spec)


def _job_id() -> str:
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '0')}"
    return os.environ.get("SLURM_JOB_ID") or os.environ.get("SUBMITIT_LOCAL_JOB_ID") or str(os.getppid())


def executor(kind: str, folder: Path, suite: Suite, device: str):
    """A submitit executor for ``kind`` with the suite's launcher parameters."""
    submitit = _submitit()
    p = suite.launcher
    nproc = int(suite.settings.nproc)
    gpus = p.gpus_per_task if p.gpus_per_task is not None else (nproc if device == "cuda" else 0)
    # The array task imports posbench from where this one does (a checkout or an install): set in
    # the environment it inherits (``_starting``) and, for sbatch's script, quoted (a path may hold
    # a space). The suite's own setup lines run only with --allow-setup-commands (``submit``).
    export = f"export PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}"
    setup = [export] + list(p.setup) if (p.setup or kind == "slurm") else []
    if kind == "local":
        ex = submitit.LocalExecutor(folder=folder, python=sys.executable)
        ex.update_parameters(timeout_min=p.time_min, gpus_per_node=gpus, setup=setup)
        return ex
    ex = submitit.SlurmExecutor(folder=folder, python=sys.executable)
    params = dict(
        time=p.time_min,
        array_parallelism=p.array_parallelism,
        setup=setup,
        job_name=f"posbench-{suite.name}",
        ntasks_per_node=1,
        nodes=1,
        additional_parameters=dict(p.additional),
    )
    if gpus:
        params["gpus_per_task"] = gpus
    for key, value in (
        ("partition", p.partition),
        ("account", p.account),
        ("qos", p.qos),
        ("constraint", p.constraint),
        ("cpus_per_task", p.cpus_per_task),
    ):
        if value is not None:
            params[key] = value
    if p.mem_gb is not None:
        params["mem"] = f"{int(p.mem_gb * 1024)}M"
    ex.update_parameters(**params)
    return ex


@dataclass
class Submitted:
    run_dir: Path
    run_id: str
    record: dict
    units: list[str] = field(default_factory=list)  # keys submitted now
    busy: list[str] = field(default_factory=list)  # keys left alone: their task is still queued or running
    waiting: list[dict] = field(default_factory=list)  # local: specs submitted as earlier ones end
    executor: object = None  # what submits them
    parallelism: int = 1 << 30  # local: tasks at once


def setup_refusal(suite: Suite, allowed: bool) -> None:
    """A suite's ``launcher.setup`` lines are shell commands: run only when the user opts in on the
    command line (``--allow-setup-commands``), each time; otherwise one line naming them."""
    lines = list(suite.launcher.setup)
    if lines and not allowed:
        shown = "; ".join(lines)
        raise LauncherError(
            f"suite {suite.name}'s launcher.setup runs shell commands before each task: "
            f"{shown[:300]}{'...' if len(shown) > 300 else ''}; allowed: --allow-setup-commands "
            "to run them (this time), or remove launcher.setup"
        )


def preflight(kind: str) -> None:
    """What a launch needs before any run file is written: submitit, and sbatch for Slurm."""
    _submitit()
    missing = [tool for tool in ("sbatch", "srun") if kind == "slurm" and shutil.which(tool) is None]
    if missing:
        raise LauncherError(
            f"--launcher slurm: no {' or '.join(missing)} on this machine's PATH (Slurm is not "
            "installed or not loaded); allowed: run on a Slurm login node, --launcher local, or "
            "leave --launcher out"
        )


def submit(suite: Suite, options: RunOptions) -> Submitted:
    """Plan under the run folder's lock; decide, under each unit's lock, what is left (job state
    and rows as they are then); record every unit in ``launcher.json`` before any task starts;
    then start them (``_submit_specs``). ``options.launcher`` says through what."""
    from posbench.engine import env as envmod

    kind, device = options.launcher, options.device
    setup_refusal(suite, options.allow_setup)
    preflight(kind)
    run_id, run_dir = run_folder(suite, options)
    dirs = options.resolved_dirs()
    held: list[int] = []
    unit_locks: list[UnitLock] = []

    def take_folder() -> bool:
        try:
            (run_dir / ROWS_DIR).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"cannot create {run_dir}: {exc.strerror or exc}") from None
        held.append(lock_run_dir(run_dir))
        clean_stale_temp_dirs()
        return True

    try:
        plan = plan_run(suite, options, run_dir, lock=take_folder, launched=True)
        suite = plan.suite
        launched_sweep.check_folder(run_dir)
        write_run_meta(run_dir, plan.run_meta(device, run_id))
        environment = envmod.collect(device, suite.settings.flush_denormal)
        write_env(run_dir / "env.json", environment)
        (run_dir / "cases.jsonl").touch()  # the folder is a run folder to every reader from now on
        commit = environment["git_commit"] + ("-dirty" if environment["git_dirty"] else "")
        current = launched_sweep.Sweep.read(run_dir)  # what an earlier launch left: its record, rows, finished units
        record = current.record if current else {"format": 1, "units": {}}
        if record["units"] and record.get("launcher") != kind:
            states, current = state.settled(current)
            if any(s.active for s in states.values()):
                raise LauncherError(
                    f"{run_dir}: tasks of a {record.get('launcher')} launch are still queued or running; "
                    f"allowed: wait (bench.py status {run_dir}) or the same --launcher"
                )
        record.update(launcher=kind, command=options.arguments(), commit=commit, device=device, folder=launched_sweep.JOBS_DIR)
        out = Submitted(run_dir, run_id, record)
        # The decision, per unit, under its lock (a live task holds it): its job's state and the
        # rows as they are now, not as they were when the plan was made.
        chosen: list[Unit] = []
        for unit in plan.units:
            lock = UnitLock(run_dir, unit.key, wait=False)
            old = record["units"].get(unit.key)
            # (its lock is held here: the job's own state is what is left to ask)
            if not lock.held or (
                old is not None and state.job_state(record, old, current is not None and unit.key in current.done).active
            ):
                lock.close()
                out.busy.append(unit.key)
                continue
            unit_locks.append(lock)
            chosen.append(unit)
        now_rows = latest_rounds(read_run_rows(run_dir, []))
        submission = launched_sweep.Submission(run_dir, run_id, commit, dirs, _now(), state.submitter())
        entries = (launched_sweep.unit_entry(unit.key, unit.todo, plan.done, now_rows, submission) for unit in chosen)
        specs = [spec for spec in entries if spec is not None]
        for spec in specs:  # recorded before any task starts: a killed submitter loses no unit
            record["units"][spec["key"]] = dict(spec, job_id="")
        launched_sweep.write_record(run_dir, record)
        for lock in unit_locks:  # a task of an older submission that starts now sees it was replaced
            lock.close()
        from posbench.run.runner import ask_unavailable

        answers = ask_unavailable([CaseSpec.from_json(c) for spec in specs for c, _r in spec["todo"]], dirs)
        for spec in specs:
            spec["answers"] = {CaseSpec.from_json(c).id: answers.get(CaseSpec.from_json(c).id) for c, _r in spec["todo"]}
        if kind == "local":
            # submitit's local executor has no array throttle: the follower starts the rest. All
            # tasks share this machine, so a timed task's units run one at a time (as --parallel).
            out.parallelism = 1 if plan.timed else suite.launcher.array_parallelism
            # (tasks of an earlier submission still running take their slots)
            start = max(0, out.parallelism - len(out.busy))
            specs, out.waiting = specs[:start], specs[start:]
        try:
            out.executor = executor(kind, run_dir / launched_sweep.JOBS_DIR, suite, device)
        except RuntimeError as exc:  # submitit's own check of the cluster
            raise LauncherError(
                f"--launcher {kind}: {str(exc).strip()[:300]}; allowed: --launcher local, or leave --launcher out"
            ) from None
        _submit_specs(out, specs, out.executor)
        return out
    finally:
        for lock in unit_locks:
            lock.close()
        for fd in held:
            os.close(fd)


@contextlib.contextmanager
def _starting(log: Path):
    """While tasks start: the environment they inherit imports this posbench, and their stdio is
    ``log``, not this process's (``--detach | cat`` returns once the launch is done)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    old_path = os.environ.get("PYTHONPATH")
    log.parent.mkdir(parents=True, exist_ok=True)
    out_fd = open_nofollow(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    null_fd = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null_fd, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), old_path]))
        yield
    finally:
        for fd, copy in zip((0, 1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(out_fd)
        os.close(null_fd)
        if old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old_path


def _submit_specs(out: Submitted, specs: list[dict], ex) -> None:
    """Start ``specs`` (already in the record, without job id) as one job array; record their ids."""
    if not specs:
        return
    try:
        with _starting(out.run_dir / launched_sweep.JOBS_DIR / "launch.log"):
            array = ex.map_array(UnitTask(), specs)  # one job array, a task per unit
    except (OSError, RuntimeError, ValueError) as exc:  # sbatch refused (submitit raises its own errors)
        why = str(exc).strip().splitlines()[-1:] or [type(exc).__name__]
        raise LauncherError(
            f"{out.record.get('launcher')} could not start the tasks: {why[0][:300]}; "
            f"the units are recorded (bench.py status {out.run_dir} resubmits them)"
        ) from None
    for spec, job in zip(specs, array):
        out.record["units"][spec["key"]] = dict(spec, job_id=str(job.job_id))
        out.units.append(spec["key"])
    launched_sweep.write_record(out.run_dir, out.record)  # status finds the jobs from here


def follow(
    out: Submitted, on_row: Callable[[dict], None] | None = None, poll_s: float = 2.0
) -> tuple[dict[str, state.JobState], launched_sweep.Sweep]:
    """Until every submitted task has ended: rows as they land (``on_row``), failure rows for tasks
    that died (``sweep_state.settle_units``), and, for the local launcher, the next tasks as slots
    free. Returns each unit's last state and the sweep as the folder then holds it (its last
    read prints the rows files' skipped lines): what ``bench.py status`` would read back."""
    seen: set = set()
    while True:
        states = state.settle_units(launched_sweep.Sweep.of(out.run_dir, out.record))
        active = sum(1 for s in states.values() if s.active and s.state != "WAITING")
        ended = not active and not out.waiting
        # Read after asking the states: a row that landed meanwhile is not missed.
        now = launched_sweep.Sweep.of(out.run_dir, out.record, warn=ended)
        for key in out.record["units"]:
            for cid, rnd, row in now.landed[key]:
                if (key, cid, rnd) not in seen:
                    seen.add((key, cid, rnd))
                    if on_row is not None:
                        on_row(row)
        if out.waiting and active < out.parallelism:
            free = out.parallelism - active
            batch, out.waiting = out.waiting[:free], out.waiting[free:]
            _submit_specs(out, batch, out.executor)
            continue
        if ended:
            return states, now
        time.sleep(poll_s)

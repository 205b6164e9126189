"""Runs a suite: one worker process per case (or paired-windows group), rows saved as cases end,
resumable (``run_suite``, steered by a ``RunOptions``, ``posbench.run.options``).

The run folder is ``<results>/<suite>/<run id>`` (``posbench.store``); the id hashes version,
task, settings and grid, so the same command resumes. The plan (resume, rounds, shards, groups)
is ``posbench.run.schedule``'s; the local pool ``pool``; bench.py under torchrun ``ranks``.
docs/reliability.md, docs/distributed.md and docs/many-gpus.md tell the whole story.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from posbench.core.case import CaseSpec
from posbench.core.files import WriteError
from posbench.run import pool
from posbench.run.isolated import unavailable_reason
from posbench.run.launch import cpu_malloc_env, run_group_worker, run_worker
from posbench.run.machine import clean_stale_temp_dirs, record_machine
from posbench.run.options import RunOptions, run_folder
from posbench.run.progress import Progress, write_progress
from posbench.run.ranks import RanksOutOfStep, run_on_ranks
from posbench.run.schedule import Plan, pairing_of, plan_run, rounds_of
from posbench.run.suite import Suite
from posbench.store.meta import write_run_meta
from posbench.store.row import make_row
from posbench.store.run_rows import case_rows, read_usable_run_rows
from posbench.store.writing import lock_run_dir, save_row, write_env


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into an exception by the CLI's handler so that it ends a run the way Ctrl-C
    does (the worker killed, the resume command printed), with exit status 143."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM: the current worker was killed; ``cases.jsonl`` holds every finished case.
    ``signum`` is the signal (SIGINT or SIGTERM)."""

    def __init__(self, run_dir: Path, run_id: str, done: int, total: int, signum: int = signal.SIGINT):
        super().__init__(f"interrupted after {done} of {total} cases")
        self.run_dir, self.run_id, self.done, self.total = run_dir, run_id, done, total
        self.signum = int(signum)


def detect_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass
class RunResult:
    run_dir: Path
    run_id: str
    rows: list[dict] = field(default_factory=list)  # latest row per case of this run
    ran: int = 0  # rows written by this pass's workers (a row per case and round)
    skipped: int = 0
    unavailable: int = 0  # rows of cases known unavailable here before any worker (``ask_unavailable``)
    cases: int = 0  # distinct cases among the rows ``ran`` counts


UNAVAILABLE_TIMEOUT_S = 120.0  # asking every method of a run whether it runs here (imports torch)


def _loaded_here(case: CaseSpec) -> bool:
    """Whether asking ``case`` runs no code this process has not run: a task's own variants, or a
    method class already registered here (from code, or a file imported before)."""
    from posbench import tasks
    from posbench.core import registry

    return tasks.get(case.task).own_methods or case.method in registry.registered()


def ask_unavailable(cases: list[CaseSpec], methods_dirs: Sequence[str] = ()) -> dict[str, dict | None]:
    """case id -> None (its worker runs it), an ``unavailable`` result (the method's reason), or an
    ``error`` result (asking failed: the method file does not import, exits or blocks). Methods
    whose files are not loaded here are asked in one child process with a time limit
    (``posbench.run.isolated``); when that child fails, each method again in a child of its own,
    so one bad method file costs its own rows only."""
    from posbench.run import isolated

    out: dict[str, dict | None] = {}
    remote: dict[str, CaseSpec] = {}
    for case in cases:
        if case.id in out or case.id in remote:
            continue
        if _loaded_here(case):
            reason = unavailable_reason(case)
            out[case.id] = {"status": "unavailable", "message": reason} if reason else None
        else:
            remote[case.id] = case

    def ask(batch: list[CaseSpec], what: str) -> None:
        answers = isolated.call(
            "posbench.run.isolated:unavailable",
            {"cases": [c.to_json() for c in batch]},
            UNAVAILABLE_TIMEOUT_S,
            methods_dirs,
            what,
        )
        for case, (reason, error) in zip(batch, answers):
            out[case.id] = (
                _asking_failed(case, error) if error else {"status": "unavailable", "message": reason} if reason else None
            )

    if not remote:
        return out
    by_method: dict[str, list[CaseSpec]] = {}
    for case in remote.values():
        by_method.setdefault(case.method, []).append(case)
    if len(by_method) > 1:
        try:
            ask(list(remote.values()), "asking the methods whether they run here")
            return out
        except isolated.PosbenchError:
            pass
    for method, batch in by_method.items():
        try:
            ask(batch, f"method {method}")
        except isolated.PosbenchError as exc:
            for case in batch:
                out[case.id] = _asking_failed(case, str(exc))
    return out


def _asking_failed(case: CaseSpec, why: str) -> dict:
    return {
        "status": "error",
        "message": f"cannot ask {case.method} whether it runs here: {why}",
        "traceback": "",
        "metrics": {},
        "series": {},
    }


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (a progress bar can redraw in place)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def run_suite(suite: Suite, options: RunOptions) -> RunResult:
    """Run ``suite`` as ``options`` say, holding the run folder's lock, released at the end."""
    held: list[int] = []
    try:
        return _run_suite(suite, options, held)
    finally:
        for fd in held:
            os.close(fd)


def _run_suite(suite: Suite, o: RunOptions, held_locks: list[int]) -> RunResult:
    from posbench.engine import distributed
    from posbench.engine import env as envmod

    main = distributed.is_main()  # in-process distributed: rank 0 alone writes and reports
    device = o.device
    run_id, run_dir = run_folder(suite, o)
    slots = pool.slots_for(suite, o)  # refused before anything is written

    def take_folder() -> bool:
        if not main:
            return False
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"cannot create {run_dir}: {exc.strerror or exc}") from None
        held_locks.append(lock_run_dir(run_dir))
        clean_stale_temp_dirs()
        return True

    plan = plan_run(suite, o, run_dir, take_folder)
    suite = plan.suite
    if main:
        write_run_meta(run_dir, plan.run_meta(device, run_id), o.command)
        if o.on_start:  # a first line within seconds, before anything slow (the environment, workers)
            o.on_start(plan, run_dir)
    environment = envmod.collect(device, suite.settings.flush_denormal)
    if device == "cpu":  # what every worker runs under (worker_env): part of what was measured
        environment["worker_malloc"] = cpu_malloc_env()
    if main:
        write_env(run_dir / "env.json", environment)
    commit = environment["git_commit"] + ("-dirty" if environment["git_dirty"] else "")
    if main:
        record_machine(run_dir, "start", device, suite.task.timed)
    out = RunResult(run_dir, run_id, skipped=len(plan.done))
    _run_todo(plan, o, commit, out, main, slots)
    if main:
        record_machine(run_dir, "end", device, suite.task.timed)
    # Every case of the suite this run folder holds, also those of earlier narrowed runs, so the
    # table has the baseline even when this command ran only some methods.
    wanted = {c.id for c in suite.cases(device, run_id)}
    if main:
        out.rows = [r for cid, r in case_rows(read_usable_run_rows(run_dir)).items() if cid in wanted]
    return out


def _run_todo(plan: Plan, o: RunOptions, commit: str, out: RunResult, main: bool, slots: list | None = None) -> None:
    """Run the plan's (case, round)s, a row saved as each case ends (``out`` counts): job by job,
    or unit by unit on the local pool's ``slots`` (``posbench.run.pool``), rows saved here either way."""
    from tqdm import tqdm

    suite, todo = plan.suite, plan.todo
    run_dir, run_id = out.run_dir, out.run_id
    rounds = max((rounds_of(c) for c, _r in todo), default=1)
    asked: dict[str, dict | None] = {}  # ``ask_unavailable``'s answers, once asked
    progress = Progress(0, len(todo), time.time())  # ``total``: what workers run, once asked
    ran_cases: set[str] = set()
    if main:
        write_progress(run_dir, progress)
    # The bar redraws one line with carriage returns: on a terminal. In a log (output not a
    # terminal) those frames pile up, so there the per-case lines of ``on_row`` are the progress.
    bar = tqdm(
        total=len(todo),
        desc=suite.name,
        unit="round" if rounds > 1 else "case",
        file=sys.stderr,
        disable=not o.progress or not main or not is_terminal(sys.stderr),
    )

    def emit(case: CaseSpec, result: dict, started: datetime, duration: float, rnd: int, info: dict | None = None) -> None:
        if (case.id, rnd) in plan.lone:  # timed apart from its grid point's other methods (--unpaired)
            info = {**(info or {}), "paired": False}
        row = make_row(case, result, started, duration, commit, rnd, info)  # info: the pool's unit, GPUs
        if main:
            save_row(run_dir / "cases.jsonl", row)
        bar.update(1)
        if (asked.get(case.id) or {}).get("status") == "unavailable":  # no worker ran it: not counted
            out.unavailable += 1
            number = 0
        else:
            out.ran += 1
            ran_cases.add(case.id)
            out.cases = len(ran_cases)
            number = out.ran
        if main:
            write_progress(run_dir, dataclasses.replace(progress, done=out.ran))
        if o.on_row and main:
            shown = {**row, "job_wall": result["job_wall"]} if result.get("job_wall") else row
            o.on_row(shown, number, progress.total)
        if result.get("out_of_step"):
            raise RanksOutOfStep(run_dir, row)

    def describe(job: list[CaseSpec], rnd: int) -> None:
        runs = [c.method for c in job if asked.get(c.id) is None]  # not set aside as unavailable
        what = job[0].id if len(job) == 1 else f"{len(runs)} methods at {_point(job[0])}"
        what += f" round {rnd}/{rounds_of(job[0])}" if rounds > 1 else ""
        bar.set_postfix_str(what)
        if o.progress and main and len(runs) > 1:
            # A paired group's rows come only when the whole group ends (a minute and more on a
            # CPU): said as it starts, so the first lines of a run come within seconds.
            names = ", ".join(runs)
            first = f"[{out.ran + 1}-{out.ran + len(runs)}/{progress.total}]"
            tqdm.write(f"{first} started: {what} ({names}; paired windows, their lines when all end)", file=sys.stdout)

    try:
        # Method files are user code: asked in a child with a time limit (``ask_unavailable``).
        answers = {} if o.in_process else ask_unavailable([c for c, _r in todo], o.methods_dirs)
        asked.update(answers)
        set_aside = sum((answers.get(c.id) or {}).get("status") == "unavailable" for c, _r in todo)
        progress = dataclasses.replace(progress, total=len(todo) - set_aside)
        if main:
            write_progress(run_dir, progress)
        workers = Workers(run_dir, run_id, answers, o.in_process)
        if not slots:
            run_jobs(plan.jobs, workers, emit, describe=describe)
        else:
            busy: dict[int, str] = {}

            def run_unit(unit, slot, report, stopped) -> None:
                info = dict(slot.info(), unit=unit.key)
                on_slot = dataclasses.replace(workers, env=slot.env())
                run_jobs(unit.jobs, on_slot, lambda *what: report(*what, info), stopped=stopped)

            def on_start(unit, slot) -> None:
                busy[slot.index] = unit.key
                bar.set_postfix_str(f"{len(busy)} slots: " + ", ".join(busy[i] for i in sorted(busy)))

            pool.run_units(plan.units, slots, run_unit, emit, on_start)
    except RanksOutOfStep:
        bar.close()
        raise
    except KeyboardInterrupt as exc:
        bar.close()
        signum = signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT
        raise Interrupted(run_dir, run_id, out.ran + out.unavailable, len(todo), signum) from None
    bar.close()


@dataclass(frozen=True)
class Workers:
    """Where and how the jobs of a run reach their worker processes: the run folder the cases
    write into, the run id (it keys torchrun's rendezvous of a case run on ranks), what
    ``ask_unavailable`` found (a case not in it is asked in this process), whether cases run on
    the joined ranks of this process (``in_process``), and the environment every worker gets (a
    pool slot's GPUs)."""

    run_dir: Path
    run_id: str
    answers: dict[str, dict | None]
    in_process: bool = False
    env: dict[str, str] | None = None


def run_jobs(
    jobs: list[tuple[list[CaseSpec], int]],
    workers: Workers,
    emit: Callable[..., None],
    stopped=None,
    describe: Callable[[list[CaseSpec], int], None] | None = None,
) -> None:
    """Run ``jobs`` (``schedule.jobs``: a case, or a paired-windows group, and its round) one by one
    and call ``emit(case, result, started, duration, round)`` for each case as its job ends.
    ``stopped`` (an Event) set: no further job starts."""
    for i, (job, rnd) in enumerate(jobs):
        if stopped is not None and stopped.is_set():
            return
        started, t0 = datetime.now(timezone.utc), time.perf_counter()
        if describe is not None:
            describe(job, rnd)
        for case in job:
            case.out_dir = str(workers.run_dir)
        results = _run_job(job, rnd, f"posbench/{workers.run_id}/{i}/{rnd}", workers)
        # A group's wall time is shared out among the cases its worker ran (rows of a case sum to
        # its time); the progress line of each is told so (``job_wall``: its place, the group's size
        # and time), to show a case's share and the group's time once.
        # A case set aside as unavailable before it (``workers.answers``) ran no worker: 0 s.
        seconds = time.perf_counter() - t0
        ran = [c.id for c in job if workers.answers.get(c.id) is None]
        for case, result in zip(job, results):
            if case.id not in ran:
                emit(case, result, started, 0.0, rnd)
                continue
            if len(ran) > 1:
                wall = {"index": ran.index(case.id) + 1, "cases": len(ran), "seconds": round(seconds, 3)}
                result = {**result, "job_wall": wall}  # for the progress line only (``emit``), not stored
            emit(case, result, started, seconds / len(ran), rnd)


def _point(case: CaseSpec) -> str:
    return " ".join(f"{k}={v}" for k, v in case.params.items())


def _run_job(job: list[CaseSpec], rnd: int, key: str, workers: Workers) -> list[dict]:
    """The results of one job of ``jobs``: a case alone in its worker, or a group in one worker.
    A case its method cannot run here is ``unavailable`` without a worker (``workers.answers``:
    what ``ask_unavailable`` found; a case not in it is asked here, in this process)."""
    answers, env = workers.answers, workers.env
    results: dict[str, dict] = {}
    runnable = []
    for case in job:
        if case.id in answers:
            answer = answers[case.id]
        else:
            reason = unavailable_reason(case)
            answer = {"status": "unavailable", "message": reason} if reason else None
        if answer is not None:
            results[case.id] = answer
        else:
            runnable.append(case)
    if runnable and pairing_of(runnable[0]) == "windows":
        timeout = runnable[0].settings["timeout_s"] * len(runnable)
        results.update(zip((c.id for c in runnable), run_group_worker(runnable, rnd, timeout, env)))
    elif runnable:
        (case,) = runnable
        results[case.id] = run_on_ranks(case, key) if workers.in_process else run_worker(case, case.settings["timeout_s"], env)
    return [results[c.id] for c in job]

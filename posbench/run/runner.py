"""Runs a suite: one worker process per case, rows appended as cases end, resumable.

Layout: ``<results>/<suite>/<run-id>/cases.jsonl`` (one JSON row per case, appended, flushed and
fsynced as each case ends), ``run.json`` (the suite's name, version, task, baseline, method
order, metrics, settings and grid; rewritten atomically whenever the run starts or resumes),
``env.json`` (written when the run starts), and at the end ``table.md`` / ``table.csv``.
``posbench.report.rows`` reads them all.

The run id is ``<profile>-<device>-<hash of version, task, settings and grid>``, so the same
command lands in the same folder and resumes: a case with a row is not run again. Every status
counts as done; ``retry_failed`` re-runs cases whose latest row is ``error`` or ``timeout`` (their
new row is appended; readers take the last row per case). ``fresh`` starts a new folder (the id
gets a time suffix), ``run_id`` picks one by name. The method list is not in the hash, so running
more methods later adds them to the same run and table.

Distributed cases. A suite with ``nproc: N`` > 1 has each case launched as ``python -m
torch.distributed.run --standalone --nproc_per_node N -m posbench.run.worker ...``: torchrun starts
and watches the ranks, one case at a time on the node; the worker's rank files say which rank
failed (``worker.read_result``). When bench.py itself runs under torchrun (``WORLD_SIZE`` > 1),
every rank runs this runner and each case runs in-process on the already-joined process group
(``in_process=True``): rank 0 plans and broadcasts the case list, ranks exchange their outcomes
through the rendezvous store, and rank 0 alone writes rows. Sharding (``shard=(i, n)``) keeps
case k of the suite's full case list when k % n == i; shards share the run id, so their folders
merge in ``bench.py report``.

Rounds. A suite setting ``rounds: k`` measures every case k times, interleaved: per grid point,
round 1 of each method, then round 2, ... (``schedule``), so the methods of a point share the
machine's drift and their per-round ratios cancel it (``posbench.report.bootstrap``). Each round is a
fresh worker process and its own row (``round`` 1..k); resume and ``retry_failed`` work per
(case, round), and readers merge a case's rounds (``posbench.report.rows.merge_rounds``).

Paired windows. With ``pairing: windows`` the unit a worker process runs is a group: every case
of one grid point and round (``jobs``), measured together by the task's ``run_group``, which
alternates short measured windows between the methods (``posbench.engine.windows``), so their ratios
cancel drift that per-process rounds leave in. Each case still gets its own row per round. A
method that fails inside the group gets its own failure row and the others go on; a group
process that dies or times out (limit: ``timeout_s`` per case of the group) gives every case of
the group that row. Resume and ``retry_failed`` stay per (case, round): the missing cases of a
point and round run together in one group (a case re-run alone pairs with the baseline by its
round's median, ``posbench.report.bootstrap.window_clusters``). Rows are saved when the group ends, so
an interrupted group runs again whole.
"""
from __future__ import annotations

import difflib
import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Optional

from posbench import __version__
from posbench.core.case import Case
from posbench.core.files import WriteError, atomic_write_text
from posbench.report.rows import (ROW_KEYS, RowsError, RunMeta, case_rows, check_row, latest, latest_rounds,  # noqa: F401
                   read_rows, write_run_meta)  # latest: re-exported
from posbench.run.suite import Suite, SuiteError, check_name
from posbench.run.worker import OOM_TEXT, die_with_parent, first_failure, rank_failure, read_result, run_case

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
RETRYABLE = ("error", "timeout")


class RanksOutOfStep(Exception):
    """In-process distributed run: ranks ended a case differently (one failed alone), so their
    collectives may be out of step; the run stops after writing the case's row."""

    def __init__(self, run_dir: Path, row: dict):
        super().__init__(f"{row['case_id']}: {row['message']}: the ranks ended this case differently, so their "
                         f"process group cannot be trusted; the run stops here (rows are in {run_dir}/cases.jsonl; "
                         "re-run the same command to resume)")
        self.run_dir, self.row = run_dir, row


class Interrupted(Exception):
    """Ctrl-C: the current worker was killed; ``cases.jsonl`` holds every finished case."""

    def __init__(self, run_dir: Path, run_id: str, done: int, total: int):
        super().__init__(f"interrupted after {done} of {total} cases")
        self.run_dir, self.run_id, self.done, self.total = run_dir, run_id, done, total


def detect_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def default_run_id(suite: Suite, device: str) -> str:
    return f"{suite.profile}-{device}-{suite.fingerprint()}"


# ---------------------------------------------------------------------------------------------
# cases.jsonl


# Reading rows (``read_rows``) and the latest row per case (``latest``) live in posbench.report.rows;
# ``read_usable_rows`` is the runner's lenient reading for resuming.


def read_usable_rows(path: Path, problems: list[str] | None = None) -> list[dict]:
    """Every usable row of ``cases.jsonl``, for resuming a run. Unlike ``rows.read_rows`` (which
    stops at the first bad line), a line that is not UTF-8, not JSON or not a row
    (``rows.check_row``) is skipped and described in ``problems`` naming the file and line, so a
    damaged line costs its case a re-run, not the whole run. A torn last line (a runner killed
    mid-write) is skipped silently: the next append cuts it off."""
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):  # no run yet (the CLI says why it cannot start one)
        return []
    lines = data.split(b"\n")
    rows = []
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            rows.append(check_row(json.loads(raw.decode("utf-8")), f"{path}:{n}"))
            continue
        except UnicodeDecodeError:
            why = f"{path}:{n}: not UTF-8 text"
        except json.JSONDecodeError as exc:
            why = f"{path}:{n}: not JSON ({exc.msg})"
        except RowsError as exc:
            why = str(exc)
        if n < len(lines) and problems is not None:  # n == len(lines): a torn tail, no newline yet
            problems.append(f"{why}; line skipped")
    return rows


def append_row(path: Path, row: dict) -> None:
    """Append one line durably; first cut off a torn tail so the file stays one row per line."""
    data = (json.dumps(row, allow_nan=False) + "\n").encode()
    with open(path, "ab+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(max(0, size - 65536))
            tail = fh.read()
            if not tail.endswith(b"\n"):
                cut = tail.rfind(b"\n")
                fh.truncate(size - len(tail) + cut + 1 if cut >= 0 else 0)
        fh.seek(0, os.SEEK_END)
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


class RowNotSaved(WriteError):
    """A case finished but its row could not be appended; the run stops (nothing after it would
    be saved either) and the message names the case to run again."""


def save_row(path: Path, row: dict, retries: tuple[float, ...] = (0.5, 2.0)) -> None:
    """``append_row``, retried after short pauses (a full disk may be freed, an NFS hiccup
    passes); a torn partial write is cut off by the next attempt. Still failing: RowNotSaved."""
    for pause in retries + (None,):
        try:
            append_row(path, row)
            return
        except OSError as exc:
            if pause is None:
                raise RowNotSaved(f"cannot write {path}: {exc.strerror or exc}; case {row['case_id']} finished "
                                  "but its row is not saved: fix the folder, then re-run the same command "
                                  "(it resumes and runs that case again)") from None
            time.sleep(pause)


# ---------------------------------------------------------------------------------------------
# The run folder: one runner at a time, and temp folders of runners that died


class RunLocked(Exception):
    """Another process holds the run folder's lock; ``str()`` is the one line to print."""


def lock_run_dir(run_dir: Path) -> int:
    """Take the exclusive lock on ``run_dir`` (flock on ``run_dir/.lock``, which holds the owner's
    PID); returns the descriptor that holds it (closing it, or the process ending, releases it).
    A second runner on the same folder would run every case again and time them while competing."""
    path = run_dir / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise WriteError(f"cannot lock {path}: {exc.strerror or exc}") from None
        raise RunLocked(f"{run_dir}: the run folder is in use by process {holder} (another bench.py); "
                        "allowed: wait for it to finish, or pick another --run-id") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


TEMP_PREFIX = "posbench-"  # worker temp folders: posbench-<runner pid>-<random>


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def clean_stale_temp_dirs(root: str | None = None) -> list[Path]:
    """Remove worker temp folders whose runner is gone (killed with -9: nothing ran its cleanup)."""
    removed = []
    for path in Path(root or tempfile.gettempdir()).glob(TEMP_PREFIX + "*"):
        m = re.fullmatch(re.escape(TEMP_PREFIX) + r"(\d+)-.*", path.name)
        if m and path.is_dir() and not _alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def write_env(path: Path, environment: dict) -> None:
    """env.json, written atomically; an existing one is kept unless it is unreadable (an empty
    file left by an older version, a torn write), which is rewritten."""
    try:
        if isinstance(json.loads(path.read_text(encoding="utf-8")), dict):
            return
    except (OSError, UnicodeDecodeError, ValueError):
        pass
    atomic_write_text(path, json.dumps(environment, indent=2) + "\n")


def _finite(metrics: dict) -> dict:
    """JSON has no NaN: non-finite numbers become null (the status says what went wrong)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


# ---------------------------------------------------------------------------------------------
# One case


def unavailable_reason(case: Case) -> Optional[str]:
    """The method's own answer for this device and dtype, decided without a worker."""
    import torch

    from posbench.core import registry
    from posbench.core import task as tasks

    task = tasks.get(case.task)
    if task.own_methods:  # tasks whose "methods" are not position methods answer for their variants
        return task.unavailable_reason(case)
    dtype = getattr(torch, case.settings.get("dtype", "float32"))
    return registry.get(case.method).unavailable(torch.device(case.device), dtype)


def worker_command(case: Case, case_file: Path, result_file: Path) -> list[str]:
    """The worker's command line: through torchrun when the case asks for several processes."""
    # -P: the current folder is not put on sys.path, so a pydantic.py or posbench/ where the user
    # stands is never imported; the package comes from PYTHONPATH (run_worker sets it).
    worker = ["-m", "posbench.run.worker", str(case_file), str(result_file)]
    nproc = case.settings.get("nproc", 1)
    if nproc > 1:
        # --standalone: a rendezvous on this node at a free port, so cases never share one.
        return [sys.executable, "-P", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                str(nproc)] + worker
    return [sys.executable, "-P"] + worker


# glibc's allocator adapts its mmap threshold to the largest block a process has freed, so two
# processes running the same code can differ 2-3x on a CPU: a decode step of the tiny model at
# C = 4096, B = 8 took 64-102 ms after a prefill that freed nothing large (every 16 MiB KV-cache
# concatenation a fresh mmap, page-faulted in) and 29-40 ms once the threshold was fixed; which
# method happened to free a large block first decided its "speed". Every CPU worker therefore gets
# one fixed policy (blocks up to 32 MiB from the heap, which is not trimmed back below 1 GiB);
# a user's own MALLOC_* settings win.
CPU_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def cpu_malloc_env() -> dict[str, str]:
    """The allocator policy of CPU workers: ``CPU_MALLOC_ENV`` where the user set nothing."""
    return {key: os.environ.get(key, value) for key, value in CPU_MALLOC_ENV.items()}


def worker_env(case: Case) -> dict[str, str]:
    """The environment of ``case``'s worker process(es)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONSAFEPATH"] = "1"  # as -P, also for the ranks torchrun starts
    threads = case.settings.get("threads")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    if case.device == "cpu":
        env.update(cpu_malloc_env())
    return env


def run_worker(case: Case, timeout_s: float) -> dict:
    """Run ``case`` in a fresh process (or torchrun's ranks); its result or how it died."""
    return _spawn(case, case.to_json(), timeout_s)


def run_group_worker(cases: list[Case], round_: int, timeout_s: float) -> list[dict]:
    """Run ``cases`` (one grid point and round) together in one fresh worker process
    (``worker.run_group``); a result per case, in order. A process that died or timed out gives
    every case its outcome, naming the methods that shared the process."""
    result = _spawn(cases[0], {"group": [c.to_json() for c in cases], "round": round_}, timeout_s)
    if isinstance(result.get("group"), list) and len(result["group"]) == len(cases):
        return result["group"]
    if result.get("status") == "ok" or "group" in result:  # a worker that broke the protocol
        result = {"status": "error", "message": "the group worker returned no result per case", "traceback": ""}
    if len(cases) > 1:
        result = dict(result, message=f"{result['message']} (one process for {', '.join(c.method for c in cases)})")
    return [dict(result) for _ in cases]


def _spawn(case: Case, payload: dict, timeout_s: float) -> dict:
    """Run the worker on ``payload`` (a case, or a group of cases like ``case``) in a fresh
    process; the result file's content, or how the process died."""
    with tempfile.TemporaryDirectory(prefix=f"{TEMP_PREFIX}{os.getpid()}-") as tmp:
        case_file, result_file, log_file = (Path(tmp) / n for n in ("case.json", "result.json", "worker.log"))
        case_file.write_text(json.dumps(payload))
        env = worker_env(case)
        with open(log_file, "wb") as log:
            # A session of its own: Ctrl-C reaches only the runner, which then ends the worker
            # (and anything it started) as a group.
            # preexec_fn: the worker gets SIGKILL when this process dies (kill -9 of bench.py
            # must not leave it running beside the resumed run).
            proc = subprocess.Popen(worker_command(case, case_file, result_file),
                                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env,
                                    preexec_fn=die_with_parent(os.getpid()))
            try:
                code = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                return {"status": "timeout", "message": f"no result after {timeout_s:g} s; worker killed",
                        "traceback": _tail(log_file)}
            except BaseException:  # KeyboardInterrupt: never leave a worker behind
                _kill(proc)
                raise
        result = read_result(result_file)  # torchrun's exit code says less than the rank files
        if result is not None:
            return result
        how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = _tail(log_file)
        # An allocation failure the worker could not catch (C++ bad_alloc, a MemoryError while
        # starting up, before it could write a result) is still out of memory.
        if any(t in tail.lower() for t in OOM_TEXT + ("memoryerror",)):
            limit = case.settings.get("memory_limit_mb")
            under = f" under memory_limit_mb {limit}" if limit else ""
            return {"status": "oom", "message": f"worker ran out of memory{under} and died ({how})",
                    "traceback": tail}
        return {"status": "error", "message": f"worker died without a result ({how})", "traceback": tail}


def _kill(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """End the worker. torchrun starts each rank in a session of its own, out of reach of a
    group kill, so it gets SIGTERM first: it then stops its ranks itself."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.wait()


def _tail(path: Path, limit: int = 4000) -> str:
    """The end of the worker's output, for rows where the worker could not report itself."""
    try:
        return path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""


# ---------------------------------------------------------------------------------------------
# A suite


@dataclass
class RunResult:
    run_dir: Path
    run_id: str
    rows: list[dict] = field(default_factory=list)  # latest row per case of this run
    ran: int = 0
    skipped: int = 0


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> (i, n) with 0 <= i < n."""
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise SuiteError(f"--shard: {text!r}: expected i/n, e.g. 0/2; allowed: 0 <= i < n") from None
    if not 0 <= i < n:
        raise SuiteError(f"--shard: {text!r}: shard index out of range; allowed: 0 <= i < n")
    return i, n


def in_shard(cases: list[Case], shard: tuple[int, int] | None) -> list[Case]:
    """Shard i of n: case k of the suite's full list when k % n == i. The full list (before
    --methods) makes the split the same on every machine whatever else the command says."""
    if shard is None:
        return cases
    i, n = shard
    return [c for k, c in enumerate(cases) if k % n == i]


def with_methods(suite: Suite, methods: list[str] | None) -> Suite:
    """The suite with ``--methods`` names it does not list appended, for this run: any registered
    method (a plugin from ``--methods-dir`` or ``POSBENCH_METHODS_PATH`` too) runs in the same
    run folder and table as the suite's own. A task that compares its own variants (``METHODS``)
    takes only those. An unknown name is one line with a "did you mean"."""
    import dataclasses

    from posbench.core import registry
    from posbench.core import task as tasks

    extra = [m for m in dict.fromkeys(methods or []) if m not in suite.methods]
    if not extra:
        return suite
    task = tasks.get(suite.task)
    known = list(task.METHODS) if task.own_methods else registry.names()
    for name in extra:
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SuiteError(f"--methods: unknown method {name!r}{hint}; allowed: the suite's methods "
                             f"or any registered one: {', '.join(known)}")
    return dataclasses.replace(suite, methods=suite.methods + extra)


def _select(suite: Suite, device: str, methods: list[str] | None, methods_dirs: list[str], run_id: str,
            shard: tuple[int, int] | None) -> list[Case]:
    check_name(run_id, "--run-id")
    suite = with_methods(suite, methods)  # a name the suite does not list joins it (or is refused)
    return [c for c in in_shard(suite.cases(device, run_id, methods_dirs), shard)
            if not methods or c.method in methods]


def rounds_of(case: Case) -> int:
    """The suite's ``rounds`` setting (tasks without it measure once)."""
    return int(case.settings.get("rounds", 1) or 1)


def schedule(cases: list[Case]) -> list[tuple[Case, int]]:
    """(case, round) in the order they run: per grid point, round 1 of every method, then round
    2, ...; each round starts one method later than the last, so no method is always first
    after a grid point change. Methods of one point are then timed at the same moments of
    machine drift, which their per-round ratios cancel (``posbench.report.bootstrap``)."""
    points: dict[str, list[Case]] = {}
    for c in cases:  # suite order: grid points outer, methods inner
        points.setdefault(json.dumps(c.params, sort_keys=True, default=str), []).append(c)
    out = []
    for group in points.values():
        for r in range(1, max(rounds_of(c) for c in group) + 1):
            shift = (r - 1) % len(group)
            out += [(c, r) for c in group[shift:] + group[:shift] if r <= rounds_of(c)]
    return out


def pairing_of(case: Case) -> str:
    """The suite's ``pairing`` setting: ``rounds`` (a process per case and round) or ``windows``."""
    return case.settings.get("pairing") or "rounds"


def jobs(todo: list[tuple[Case, int]]) -> list[tuple[list[Case], int]]:
    """The worker processes of a run, in order: (cases, round). A case alone, or with ``pairing:
    windows`` every case of ``todo`` of one grid point and round together (schedule order)."""
    out: list[tuple[list[Case], int]] = []
    groups: dict[tuple, list[Case]] = {}
    for case, rnd in todo:
        if pairing_of(case) != "windows":
            out.append(([case], rnd))
            continue
        key = (json.dumps(case.params, sort_keys=True, default=str), rnd)
        if key not in groups:
            groups[key] = []
            out.append((groups[key], rnd))
        groups[key].append(case)
    return out


def check_pairing(suite: Suite, in_process: bool) -> None:
    """``pairing: windows`` needs a task that can run a group and one process per group."""
    from posbench.core import task as tasks

    if getattr(suite.settings, "pairing", "rounds") != "windows":
        return
    if not tasks.get(suite.task).groups:
        raise SuiteError(f"pairing: windows: task {suite.task!r} cannot measure several methods in one process; "
                         "allowed: pairing: rounds")
    if in_process:
        raise SuiteError("pairing: windows runs every method of a grid point in one worker process, which a run "
                         "under torchrun (ranks in-process) cannot do; allowed: pairing: rounds")


def plan_rounds(suite: Suite, device: str, run_dir: Path, retry_failed: bool, methods: list[str] | None,
                methods_dirs: list[str], run_id: str, shard: tuple[int, int] | None = None,
                problems: list[str] | None = None) -> tuple[list[tuple[Case, int]], dict[tuple, dict]]:
    """((case, round) to run, (case_id, round) -> finished row) for this run folder: resume and
    ``retry_failed`` work round by round. Unusable lines of its cases.jsonl are skipped and
    described in ``problems``."""
    cases = _select(suite, device, methods, methods_dirs, run_id, shard)
    done = latest_rounds(read_usable_rows(run_dir / "cases.jsonl", problems))
    todo = [(c, r) for c, r in schedule(cases)
            if (c.id, r) not in done or (retry_failed and done[(c.id, r)]["status"] in RETRYABLE)]
    return todo, done


def plan(suite: Suite, device: str, run_dir: Path, retry_failed: bool, methods: list[str] | None,
         methods_dirs: list[str], run_id: str,
         shard: tuple[int, int] | None = None) -> tuple[list[Case], dict[str, dict]]:
    """(cases with a round to run, case_id -> finished row, its rounds merged) for this folder."""
    todo, _ = plan_rounds(suite, device, run_dir, retry_failed, methods, methods_dirs, run_id, shard)
    cases = list({c.id: c for c, _r in todo}.values())
    return cases, case_rows(read_usable_rows(run_dir / "cases.jsonl"))


def make_row(case: Case, result: dict, started: datetime, duration: float, commit: str, round_: int = 1) -> dict:
    row = {
        "case_id": case.id, "suite": case.suite, "task": case.task, "method": case.method,
        "params": case.params, "status": result["status"], "message": result.get("message", ""),
        "metrics": _finite(result.get("metrics", {})), "series": result.get("series", {}),
        "info": result.get("info", {}), "settings": case.settings, "device": case.device, "profile": case.profile, "run_id": case.run_id,
        "started_at": started.isoformat(timespec="seconds"), "duration_s": round(duration, 3),
        "posbench_version": __version__, "git_commit": commit, "traceback": result.get("traceback", ""),
        "round": round_,
    }
    return {k: row[k] for k in ROW_KEYS}


def is_terminal(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (a progress bar can redraw in place)."""
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def run_suite(*args, **kwargs) -> RunResult:
    """Run the suite (see ``_run_suite``) holding the run folder's lock, released at the end."""
    held: list[int] = []
    try:
        return _run_suite(*args, held_locks=held, **kwargs)
    finally:
        for fd in held:
            os.close(fd)


def _run_suite(
    suite: Suite,
    device: str,
    results: Path,
    run_id: str | None = None,
    fresh: bool = False,
    retry_failed: bool = False,
    methods: list[str] | None = None,
    methods_dirs: list[str] | None = None,
    on_row: Callable[[dict, int, int], None] | None = None,
    progress: bool = True,
    shard: tuple[int, int] | None = None,
    in_process: bool = False,
    held_locks: list[int] | None = None,
) -> RunResult:
    from tqdm import tqdm

    from posbench.engine import distributed
    from posbench.engine import env as envmod

    main = distributed.is_main()  # in-process distributed: rank 0 alone writes and reports
    if run_id is not None:
        check_name(run_id, "--run-id")
    run_id = run_id or default_run_id(suite, device)
    if fresh:
        run_id = f"{run_id}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        run_id = _broadcast(run_id, in_process)  # the clocks of ranks may straddle a second
    run_dir = Path(results) / suite.name / run_id
    check_pairing(suite, in_process)
    suite = with_methods(suite, methods)  # so the rows of added methods are this run's rows too
    methods_dirs = [str(Path(d).resolve()) for d in methods_dirs or []]
    todo, done = plan_rounds(suite, device, run_dir, retry_failed, methods, methods_dirs, run_id, shard)  # checks first
    if main:
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise WriteError(f"cannot create {run_dir}: {exc.strerror or exc}") from None
        (held_locks if held_locks is not None else []).append(lock_run_dir(run_dir))
        clean_stale_temp_dirs()
        problems: list[str] = []
        # Planned again under the lock: the rows as they are now that no one else writes them.
        todo, done = plan_rounds(suite, device, run_dir, retry_failed, methods, methods_dirs, run_id, shard,
                                 problems)
        for problem in problems:
            print(f"warning: {problem}", file=sys.stderr)
    # Rank 0's view of the run folder decides (other nodes may not even see it).
    todo, done = _broadcast((todo, done), in_process)
    if main:
        write_run_meta(run_dir, RunMeta.of_suite(suite, device, run_id))
    environment = envmod.collect(device)
    if device == "cpu":  # what every worker runs under (worker_env): part of what was measured
        environment["worker_malloc"] = cpu_malloc_env()
    if main:
        write_env(run_dir / "env.json", environment)
    commit = environment["git_commit"] + ("-dirty" if environment["git_dirty"] else "")
    if main:
        _record_machine(run_dir, "start", device)
    out = RunResult(run_dir, run_id, skipped=len(done))
    rounds = max((rounds_of(c) for c, _r in todo), default=1)
    # The bar redraws one line with carriage returns: on a terminal. In a log (output not a
    # terminal) those frames pile up, so there the per-case lines of ``on_row`` are the progress.
    bar = tqdm(total=len(todo), desc=suite.name, unit="round" if rounds > 1 else "case", file=sys.stderr,
               disable=not progress or not main or not is_terminal(sys.stderr))
    try:
        for i, (job, rnd) in enumerate(jobs(todo)):
            started, t0 = datetime.now(timezone.utc), time.perf_counter()
            what = job[0].id if len(job) == 1 else f"{len(job)} methods at {_point(job[0])}"
            bar.set_postfix_str(f"{what} round {rnd}/{rounds_of(job[0])}" if rounds > 1 else what)
            for case in job:
                case.out_dir = str(run_dir)
            results = _run_job(job, rnd, in_process, f"posbench/{run_id}/{i}/{rnd}")
            # A group's wall time is shared out among its cases (rows of a case sum to its time).
            duration = (time.perf_counter() - t0) / len(job)
            for case, result in zip(job, results):
                row = make_row(case, result, started, duration, commit, rnd)
                if main:
                    save_row(run_dir / "cases.jsonl", row)
                out.ran += 1
                bar.update(1)
                if on_row and main:
                    on_row(row, out.ran, len(todo))
                if result.get("out_of_step"):
                    bar.close()
                    raise RanksOutOfStep(run_dir, row)
    except KeyboardInterrupt:
        bar.close()
        raise Interrupted(run_dir, run_id, out.ran, len(todo)) from None
    bar.close()
    if main:
        _record_machine(run_dir, "end", device)
    # Every case of the suite this run folder holds, also those of earlier narrowed runs, so the
    # table has the baseline even when this command ran only some methods.
    wanted = {c.id for c in suite.cases(device, run_id)}
    if main:
        out.rows = [r for cid, r in case_rows(read_usable_rows(run_dir / "cases.jsonl")).items() if cid in wanted]
    return out


def _point(case: Case) -> str:
    return " ".join(f"{k}={v}" for k, v in case.params.items())


def _run_job(job: list[Case], rnd: int, in_process: bool, key: str) -> list[dict]:
    """The results of one job of ``jobs``: a case alone in its worker, or a group in one worker.
    A case its method cannot run here is ``unavailable`` without a worker."""
    results: dict[str, dict] = {}
    runnable = []
    for case in job:
        reason = unavailable_reason(case)
        if reason:
            results[case.id] = {"status": "unavailable", "message": reason}
        else:
            runnable.append(case)
    if runnable and pairing_of(runnable[0]) == "windows":
        timeout = runnable[0].settings["timeout_s"] * len(runnable)
        results.update(zip((c.id for c in runnable), run_group_worker(runnable, rnd, timeout)))
    elif runnable:
        (case,) = runnable
        results[case.id] = run_on_ranks(case, key) if in_process else run_worker(case, case.settings["timeout_s"])
    return [results[c.id] for c in job]


def _record_machine(run_dir: Path, when: str, device: str) -> None:
    """How busy the machine is now, into env.json ("machine": {"start", "end"}); a one-line
    warning when other processes compete for the CPU or GPU."""
    from posbench.engine import env as envmod

    state = envmod.machine_state(device)
    envmod.record_machine(run_dir, when, state)
    warning = envmod.busy_warning(state)
    if warning:
        print(f"posbench ({when} of run): {warning}", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# bench.py under torchrun: every rank runs the runner, cases run in-process


def _broadcast(obj, in_process: bool):
    """Rank 0's ``obj`` on every rank (pickled over the process group)."""
    if not in_process:
        return obj
    import torch.distributed as dist

    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _store():
    """The rendezvous key-value store torchrun's process group was built on. Outcomes travel
    through it, not through collectives: a rank that failed mid-case leaves its peers' collective
    sequence out of step, and one more collective could pair the wrong operations."""
    import torch.distributed.distributed_c10d as c10d

    return c10d._get_default_store()


def run_on_ranks(case: Case, key: str) -> dict:
    """Run ``case`` on this rank with the launched process group; the case's merged outcome.

    No memory limit (it would stay on the whole run) and no wall-clock limit beyond the process
    group's timeout (``timeout_s`` of the suite): that is what a run under torchrun gives up.
    """
    from posbench.engine import distributed

    rank, world = distributed.rank(), distributed.world_size()
    result = run_case(case.to_json(), limit_memory=False)
    store = _store()
    brief = {k: result.get(k) for k in ("status", "message", "traceback", "failed_at")}
    store.set(f"{key}/rank{rank}", json.dumps(brief))
    keys = [f"{key}/rank{r}" for r in range(world)]
    # A rank that failed alone waits here while its peers sit out the process group's timeout
    # in a collective: wait longer than that, or it would time out in the same instant.
    store.wait(keys, timedelta(seconds=2 * case.settings["timeout_s"] + 60))
    outcomes = [json.loads(store.get(k)) for k in keys]
    failure = first_failure([dict(o, rank=r) for r, o in enumerate(outcomes)])
    if failure is None:
        return result
    # Ranks that all failed the same way left their collectives in step (rank 0 speaks for
    # them); anything else did not, and the first failure is the cause.
    alike = len({(o["status"], o["message"]) for o in outcomes}) == 1
    if alike:
        failure = dict(outcomes[0], rank=0)
    merged = rank_failure(dict(failure, metrics={}, series={}), failure["rank"])
    merged["out_of_step"] = not alike
    return merged

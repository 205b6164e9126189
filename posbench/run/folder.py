"""The run folder's files: rows appended durably, the one-runner lock, env.json, worker temp dirs.

``cases.jsonl`` holds one JSON row per case and round, appended, flushed and fsynced as each
ends (``append_row``, retried by ``save_row``); resuming reads it leniently (``read_usable_rows``:
a damaged line costs its case a re-run, not the run). ``.lock`` (flock, the holder's PID) keeps a
second runner out; ``env.json`` records the environment and how busy the machine was at the start
and the end; worker temp folders are named for their runner so the next run can remove those of
a runner that was killed. Rows are built here too (``make_row``), in ``ROW_KEYS`` order.
``posbench.report.rows`` reads all of it back.
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from posbench import __version__
from posbench.core.case import CaseSpec
from posbench.core.files import WriteError, atomic_write_text, open_nofollow, read_regular
from posbench.core.outcome import PosbenchError
from posbench.report.rows import ROW_KEYS, read_rows, read_run_rows

# Reading rows (``read_rows``) and the latest row per case (``latest``) live in posbench.report.rows;
# ``read_usable_rows`` is the runner's lenient reading for resuming.


MAX_LINE = 64 << 20  # a row longer than this (64 MiB) is not one posbench wrote: skipped, never parsed


def read_usable_rows(path: Path, problems: list[str] | None = None) -> list[dict]:
    """Every usable row of ``cases.jsonl``, for resuming a run, through the one rows reader
    (``posbench.report.rows.read_rows``, as report and compare read them): a line that is not
    UTF-8, not JSON, nested too deep, too long or not a row is skipped and described in
    ``problems`` naming the file and line, so a damaged line costs its case a re-run, not the
    whole run; a torn last line is skipped silently (the next append cuts it off); a complete row
    without its final newline counts (the next append keeps it); only a regular file is read."""
    return read_rows(path, [] if problems is None else problems)


def read_usable_run_rows(run_dir: Path, problems: list[str] | None = None) -> list[dict]:
    """``read_usable_rows`` of the whole run folder: ``cases.jsonl`` and a launched sweep's
    per-task ``rows/*.jsonl`` (``posbench.report.rows.read_run_rows``)."""
    return read_run_rows(run_dir, [] if problems is None else problems)


CHECKED_TAIL = 64 << 20  # a last line without newline up to this size is read to see whether it is whole


def _last_line_start(fh, size: int, chunk: int = 1 << 16) -> int:
    """Offset where the file's last line begins (just after its last newline; 0 when it has none),
    searched backwards chunk by chunk however long that line is."""
    end = size
    while end > 0:
        start = max(0, end - chunk)
        fh.seek(start)
        cut = fh.read(end - start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def _repair_tail(fh, size: int) -> None:
    """The file does not end with a newline: its last line is either a whole JSON value that lost
    only its newline (kept: the newline is added) or a row torn mid-write (cut off, and only it:
    never anything before its line). A tail too long to check is kept on a line of its own
    (readers skip it with a warning), so nothing complete is ever deleted."""
    start = _last_line_start(fh, size)
    if size - start <= CHECKED_TAIL:
        fh.seek(start)
        try:
            json.loads(str(fh.read(size - start), "utf-8"))
            whole = True
        except (UnicodeDecodeError, ValueError, RecursionError):
            whole = False
        if not whole:
            fh.truncate(start)
            return
    fh.seek(size)
    fh.write(b"\n")


def append_row(path: Path, row: dict) -> None:
    """Append one line durably; first repair a last line without newline (``_repair_tail``) so the
    file stays one row per line. The file is opened without following a link (``open_nofollow``)."""
    data = (json.dumps(row, allow_nan=False) + "\n").encode()
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT)
    with os.fdopen(fd, "rb+") as fh:
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                _repair_tail(fh, size)
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


class RunLocked(PosbenchError):
    """Another process holds the run folder's lock; ``str()`` is the one line to print."""


def lock_run_dir(run_dir: Path) -> int:
    """Take the exclusive lock on ``run_dir`` (flock on ``run_dir/.lock``, which holds the owner's
    PID); returns the descriptor that holds it (closing it, or the process ending, releases it).
    A second runner on the same folder would run every case again and time them while competing."""
    path = run_dir / ".lock"
    try:
        fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, 0o644)
    except PosbenchError:
        raise
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = str(os.pread(fd, 32, 0), "utf-8", errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise WriteError(f"cannot lock {path}: {exc.strerror or exc}") from None
        raise RunLocked(f"{run_dir}: the run folder is in use by process {holder} (another bench.py); "
                        "allowed: wait for it to finish, or pick another --run-id") from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # a full disk: name the file
        os.close(fd)
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
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
        if isinstance(json.loads(str(read_regular(path, 64 << 20), "utf-8")), dict):
            return
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        pass
    atomic_write_text(path, json.dumps(environment, indent=2) + "\n")


def _finite(metrics: dict) -> dict:
    """JSON has no NaN: non-finite numbers become null (the status says what went wrong)."""
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in metrics.items()}


def make_row(case: CaseSpec, result: dict, started: datetime, duration: float, commit: str, round_: int = 1) -> dict:
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


def record_machine(run_dir: Path, when: str, device: str) -> None:
    """How busy the machine is now, into env.json ("machine": {"start", "end"}); a one-line
    warning when other processes compete for the CPU or GPU."""
    from posbench.engine import env as envmod

    state = envmod.machine_state(device)
    envmod.record_machine(run_dir, when, state)
    warning = envmod.busy_warning(state)
    if warning:
        print(f"posbench ({when} of run): {warning}", file=sys.stderr)


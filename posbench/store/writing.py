"""Writing into a run folder: rows appended durably, the one-writer lock, ``env.json``.

A row is appended, flushed and fsynced as its case ends (``append_row``, retried by
``save_row``); a torn last line is cut off first, a complete one only gets its newline back.
``.lock`` (flock, the holder's PID) keeps a second runner out of the folder; ``rows/<unit>.lock``
(``UnitLock``) is held by a launched sweep's live array task.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from pathlib import Path

from posbench.core.files import WriteError, atomic_write_text, open_lock
from posbench.core.nofollow import open_nofollow, read_regular
from posbench.core.outcome import PosbenchError
from posbench.store.file_stems import file_stem
from posbench.store.run_rows import ROWS_DIR

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
                raise RowNotSaved(
                    f"cannot write {path}: {exc.strerror or exc}; case {row['case_id']} finished "
                    "but its row is not saved: fix the folder, then re-run the same command "
                    "(it resumes and runs that case again)"
                ) from None
            time.sleep(pause)


class RunLocked(PosbenchError):
    """Another process holds the run folder's lock; ``str()`` is the one line to print."""


def lock_run_dir(run_dir: Path) -> int:
    """Take the exclusive lock on ``run_dir`` (flock on ``run_dir/.lock``, which holds the owner's
    PID); returns the descriptor that holds it (closing it, or the process ending, releases it).
    A second runner on the same folder would run every case again and time them while competing."""
    path = run_dir / ".lock"
    fd = open_lock(path)  # a link there: one line (UnsafeFile); any other failure: WriteError naming it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = str(os.pread(fd, 32, 0), "utf-8", errors="replace").strip() or "unknown"
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
            raise WriteError(f"cannot lock {path}: {exc.strerror or exc}") from None
        raise RunLocked(
            f"{run_dir}: the run folder is in use by process {holder} (another bench.py); "
            "allowed: wait for it to finish, or pick another --run-id"
        ) from None
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError as exc:  # a full disk: name the file
        os.close(fd)
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from None
    return fd


def write_env(path: Path, environment: dict) -> None:
    """env.json, written atomically; an existing one is kept unless it is unreadable (an empty
    file left by an older version, a torn write), which is rewritten."""
    try:
        if isinstance(json.loads(str(read_regular(path, 64 << 20), "utf-8")), dict):
            return
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        pass
    atomic_write_text(path, json.dumps(environment, indent=2) + "\n")


class UnitLock:
    """flock on ``rows/<unit>.lock`` (its name a safe function of the unit ``key``): held by the
    array task while it runs, so nobody writes failure rows for, or resubmits, a task that is
    alive. ``wait`` False: ``held`` says whether it was taken."""

    def __init__(self, run_dir: Path, key: str, wait: bool = True):
        (run_dir / ROWS_DIR).mkdir(parents=True, exist_ok=True)
        self.fd = open_lock(run_dir / ROWS_DIR / f"{file_stem(key)}.lock")
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            self.held = True
        except BlockingIOError:
            self.held = False

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> UnitLock:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def unit_locked(run_dir: Path, key: str) -> bool:
    """Whether a live process (the unit's array task) holds ``rows/<unit>.lock`` now."""
    try:
        with UnitLock(run_dir, key, wait=False) as lock:
            return not lock.held
    except OSError:
        return False

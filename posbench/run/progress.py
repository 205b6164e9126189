"""Where a live run stands, for ``bench.py status``: the runner keeps ``<run dir>/.progress`` (rows
written of rows to write, since when) while it holds the folder's lock (``store.writing.
lock_run_dir``); ``live_progress`` reads it only while that lock is held, so a file left by a run
that ended or was killed says nothing."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from posbench.core.files import atomic_write_text

PROGRESS_FILE = ".progress"
LOCK_FILE = ".lock"  # store.writing.lock_run_dir's


@dataclass(frozen=True)
class Progress:
    """``done`` of ``total`` (case, round)s written since ``started`` (seconds since the epoch)."""

    done: int
    total: int
    started: float

    def eta_s(self, now: float | None = None) -> float | None:
        """Seconds left at the pace so far (None before the first row)."""
        if self.done <= 0:
            return None
        elapsed = (time.time() if now is None else now) - self.started
        return max(0.0, elapsed / self.done * (self.total - self.done))

    def text(self, now: float | None = None) -> str:
        """``running, 3 of 15, ETA 4 min`` (``ETA unknown`` before the first row)."""
        if self.total <= 0:
            return "running (starting)"
        eta = self.eta_s(now)
        shown = "unknown" if eta is None else f"{eta:.0f} s" if eta < 120 else f"{eta / 60:.0f} min"
        return f"running, {self.done} of {self.total}, ETA {shown}"


def write_progress(run_dir: Path, progress: Progress) -> None:
    """The runner's record of where it stands, replaced whole (a reader never sees half a file)."""
    atomic_write_text(Path(run_dir) / PROGRESS_FILE, json.dumps(progress.__dict__) + "\n")


def lock_held(run_dir: Path) -> bool:
    """Whether a runner holds ``run_dir``'s lock now: a shared lock taken without waiting fails."""
    try:
        fd = os.open(Path(run_dir) / LOCK_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False  # no lock file (or a link there): no runner of ours
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as exc:
        return exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN)
    finally:
        os.close(fd)  # closing releases the shared lock at once
    return False


def live_progress(run_dir: Path) -> Progress | None:
    """Where the run in ``run_dir`` stands while one runs there (its lock held), else None."""
    if not lock_held(run_dir):
        return None
    try:
        raw = json.loads((Path(run_dir) / PROGRESS_FILE).read_text(encoding="utf-8"))
        return Progress(int(raw["done"]), int(raw["total"]), float(raw["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Progress(0, 0, time.time())  # locked, the plan not yet written: it is starting

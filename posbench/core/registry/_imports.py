"""Importing a method file, within a time limit where one is asked for, and remembering the files
that were imported, that failed (warned about once) and that were cut at the limit.

A method file imports in well under a second once torch is loaded; one that blocks at import is
cut after ``import_limit_s()`` when its names are listed, ``check`` loads it, or a case's worker
imports a user's file before its task runs (``posbench.run.worker``). A file that fails leaves no
module and no registered method behind. ``time_limit`` and ``timed_out`` are the same cut for task
packages (``_tasks``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

from posbench.core.registry import _tables
from posbench.core.registry._tables import RegistryError

IMPORT_LIMIT_S = 5.0
IMPORT_LIMIT_ENV = "POSBENCH_IMPORT_TIMEOUT_S"

_SCANNED: set[str] = set()  # method files imported (or being imported)
_BROKEN: dict[str, str] = {}  # file -> why it cannot be loaded (warned about once)
_TIMED_OUT: dict[str, float] = {}  # file -> the limit its import was cut at: not waited for again


class ImportTimedOut(BaseException):
    """Raised into a blocked import by the timer (a BaseException: a plugin's ``except Exception``
    cannot swallow it)."""


def import_limit_s() -> float:
    """``POSBENCH_IMPORT_TIMEOUT_S`` when it is a positive number, else ``IMPORT_LIMIT_S``."""
    try:
        value = float(os.environ.get(IMPORT_LIMIT_ENV) or IMPORT_LIMIT_S)
    except ValueError:
        return IMPORT_LIMIT_S
    return value if 0 < value < math.inf else IMPORT_LIMIT_S


def timed_out(what: str, limit_s: float) -> TimeoutError:
    """The error of an import of ``what`` (``a method file``, ``a task package``) cut at ``limit_s``."""
    return TimeoutError(
        f"its import did not finish within {limit_s:g} s (does it block at import?); "
        f"allowed: {what} that imports in seconds ({IMPORT_LIMIT_ENV} sets the limit)"
    )


@contextlib.contextmanager
def time_limit(seconds: float | None):
    """Raise ``ImportTimedOut`` into the block after ``seconds`` (SIGALRM; only on the main thread,
    else no limit). The caller imports before it what the block is not to pay for (torch)."""
    if seconds is None or threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return
    armed = [True]

    def expire(signum, frame):
        if armed[0]:
            raise ImportTimedOut()

    old = signal.signal(signal.SIGALRM, expire)
    started = time.monotonic()
    before, _ = signal.setitimer(signal.ITIMER_REAL, seconds)  # a timer someone else set: restored below
    try:
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if before:
            signal.setitimer(signal.ITIMER_REAL, max(before - (time.monotonic() - started), 1e-3))


def import_file(path: Path, limit_s: float | None = None) -> None:
    """Import the method file ``path`` once (within ``limit_s`` seconds when given); a file that
    fails raises one ``RegistryError`` line naming it."""
    path = path.resolve()
    if str(path) in _SCANNED:
        return
    _SCANNED.add(str(path))
    # A unique module name per file, so two folders may both hold e.g. "alibi.py".
    tag = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    module_name = f"posbench_methods_{path.stem}_{tag}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise RegistryError(f"cannot import method file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    if limit_s is not None:
        import posbench.core.method  # noqa: F401  (torch: its import is not the method file's to pay for)
    try:
        with time_limit(limit_s):
            spec.loader.exec_module(module)
    except RegistryError:
        raise
    except (Exception, ImportTimedOut) as exc:  # a broken plugin must say which file broke
        sys.modules.pop(module_name, None)
        _SCANNED.discard(str(path))  # asking again says why again
        _tables.unregister_file(str(path))  # classes registered before the error: the file did not load
        if isinstance(exc, ImportTimedOut):
            _TIMED_OUT[str(path)] = limit_s
            exc = timed_out("a method file", limit_s)
        raise RegistryError(f"error importing method file {path}: {type(exc).__name__}: {exc}") from exc


def is_imported(path: str | os.PathLike) -> bool:
    """Whether the method file ``path`` was imported (or is being imported) in this process."""
    return str(Path(path).resolve()) in _SCANNED


def skip_broken(path: Path, why: str) -> None:
    """Remember a file that cannot be loaded and say so once, on one line, naming the file."""
    where = str(path.resolve())
    if where not in _BROKEN:
        _BROKEN[where] = why
        print(f"warning: method file {where} skipped: {why}", file=sys.stderr)


def try_import(path: Path, limit_s: float | None = None) -> bool:
    """Import a method file; a file that fails is skipped with a warning (False). Two files
    claiming one name stay an error: which of them is meant cannot be guessed."""
    if str(path.resolve()) in _TIMED_OUT:
        return False
    try:
        import_file(path, limit_s)
        return True
    except RegistryError as exc:
        if str(exc).startswith("duplicate method name"):
            raise
        cause = exc.__cause__
        skip_broken(path, f"{type(cause).__name__}: {cause}" if cause else str(exc))
        return False


def skipped() -> str:
    """``; skipped (cannot load): FILE, ...`` for the files skipped so far (empty when none), a file
    cut at the limit saying so."""
    cut = {p: f"{p} (its import did not finish within {s:g} s)" for p, s in _TIMED_OUT.items()}
    return f"; skipped (cannot load): {', '.join(cut.get(p, p) for p in _BROKEN)}" if _BROKEN else ""


def forget_failures() -> None:
    """Forget the files found broken or cut at the limit: asking again tries them again."""
    _BROKEN.clear()
    _TIMED_OUT.clear()


def forget_imports_under(folder: str) -> None:
    """Forget that the files under ``folder`` were imported (a test's temporary plugins)."""
    _SCANNED.difference_update({f for f in _SCANNED if f.startswith(folder)})

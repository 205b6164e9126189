"""What became of a case, and the errors posbench names: the lowest module of the house.

A task raises ``Diverged`` or ``Unavailable``; the worker turns what it returned or raised into a
result (``ok_result`` / ``failure``: ``ok``, ``oom``, ``diverged``, ``unavailable``, ``error``).
``PosbenchError`` is the user's bad input, not a bug: the CLI prints its one line and exits 2.
"""

from __future__ import annotations

import sys
import time
import traceback


class PosbenchError(Exception):
    """A problem with the user's input or files, said in one line (the CLI exits 2 with it)."""


class Diverged(Exception):
    """The loss became non-finite; the row gets status ``diverged``."""


class Unavailable(Exception):
    """The case cannot run here (found only by trying, in the worker); the row gets status
    ``unavailable`` with the message as its reason."""


# What an allocation failure looks like when it surfaces as another error: the dynamic loader
# mapping a library (import torch under a small RLIMIT_AS), torch's CPU allocator, C++ bad_alloc.
OOM_TEXT = ("can't allocate memory", "cannot allocate memory", "failed to map segment", "bad_alloc", "out of memory")


def _chain(exc: BaseException):
    """``exc`` and the exceptions it was raised from or while handling (a method file's import
    error wraps the MemoryError that caused it)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def memory_cause(exc: BaseException) -> BaseException | None:
    """The allocation failure behind ``exc``, anywhere in its chain, or None."""
    torch = sys.modules.get("torch")  # only a task that imported torch can raise its errors
    for e in _chain(exc):
        if isinstance(e, MemoryError):
            return e
        if torch is not None and isinstance(e, torch.cuda.OutOfMemoryError):
            return e
        if isinstance(e, OSError) and e.errno == 12:  # ENOMEM
            return e
        if isinstance(e, (RuntimeError, ImportError, OSError)) and any(t in str(e).lower() for t in OOM_TEXT):
            return e
    return None


def classify(exc: BaseException) -> str:
    if isinstance(exc, Diverged):
        return "diverged"
    if isinstance(exc, Unavailable):
        return "unavailable"
    if memory_cause(exc) is not None:
        return "oom"
    return "error"


def failure(exc: BaseException, limit_mb: int | None = None) -> dict:
    """The result of a case that raised ``exc``: an allocation failure anywhere is ``oom``, and under
    a memory limit its message names the limit, not the file that happened to be loading."""
    status = classify(exc)
    message = str(exc) if status == "unavailable" else one_line(exc)  # the reason, as the runner gives it
    if status == "oom" and limit_mb is not None:
        message = (
            f"out of memory under memory_limit_mb {limit_mb} ({one_line(memory_cause(exc))}); "
            "allowed: a larger memory_limit_mb, or none"
        )
    return {
        "status": status,
        "message": message,
        "traceback": traceback.format_exc(),
        "metrics": {},
        "series": {},
        "failed_at": time.time(),
    }


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def ok_result(out: dict) -> dict:
    """A task's return value as an ``ok`` result."""
    return {
        "status": "ok",
        "message": "",
        "traceback": "",
        "metrics": out.get("metrics", {}),
        "series": out.get("series", {}),
        "info": out.get("info", {}),
    }

"""Reading stored files without trusting them: bounded, regular files only, every value checked.

A run folder may come from anywhere, so what the store reads passes through here: regular files
only, opened non-blocking (``open_regular``); bounded lines and files (``lines``, ``read_small``);
bounded JSON nesting (``loads``); sane values (``check_row``, ``check_params``). docs/reliability.md.
"""

from __future__ import annotations

import json
import math
import os
import stat
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, Literal

from posbench.core.nofollow import file_kind
from posbench.core.outcome import PosbenchError
from posbench.store.row import BOUNDED_SERIES

MAX_LINE = 16 << 20  # bytes in one cases.jsonl line (a row with long series is a few MiB)
MAX_FILE = 64 << 20  # bytes in run.json / env.json
MAX_DEPTH = 64  # JSON nesting (rows nest 4 or 5 levels)
MAX_ROUNDS = 10_000  # a row's "round"
MAX_WINDOWS = 10_000  # values in one series of windows or rounds (what the bootstrap resamples)
MAX_INT = 1 << 63  # integers beyond this do not round-trip through a float's integer range
MAX_NAME = 4096  # characters of a name (case id, method, metric, parameter value): they fill every table

_REQUIRED = {"case_id": str, "method": str, "status": str, "params": dict, "metrics": dict}
_OPTIONAL_DICTS = ("series", "settings", "info")
_OPTIONAL_STRINGS = (
    "suite",
    "task",
    "message",
    "device",
    "profile",
    "run_id",
    "started_at",
    "posbench_version",
    "git_commit",
    "traceback",
)


class RowsError(PosbenchError, ValueError):
    """A folder holds no run, or a stored file cannot be read; the message names file and line."""


def size_text(n: int) -> str:
    """``16 MiB`` for a whole number of MiB, else ``1,000 bytes``."""
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


def open_regular(path: Path) -> BinaryIO | None:
    """``path`` opened for binary reading, None when it does not exist; anything but a regular
    file (after links) is a ``RowsError``. Checked before opening and again on the open file, and
    opened non-blocking, so a FIFO planted between the two checks cannot hang the reader."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise RowsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        raise RowsError(f"{path}: {file_kind(st.st_mode)}, not a regular file; allowed: a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RowsError(f"{path}: cannot read: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RowsError(f"{path}: {file_kind(mode)}, not a regular file; allowed: a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_small(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of a small regular file (run.json, env.json), None when it does not exist."""
    limit = MAX_FILE if limit is None else limit
    fh = open_regular(path)
    if fh is None:
        return None
    with fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise RowsError(f"{path}: larger than {size_text(limit)}; allowed: a JSON file up to that size")
    return data


def lines(fh: BinaryIO, limit: int | None = None) -> Iterator[tuple[int, bytes | None, bool]]:
    """(line number, the line without its newline or None when longer than ``limit`` (default
    ``MAX_LINE``), whether it ended with a newline) for every line; at most ``limit`` bytes of one
    line are held at once."""
    limit = MAX_LINE if limit is None else limit
    lineno = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if line.endswith(b"\n"):
            yield lineno, line[:-1], True
            continue
        if len(line) <= limit:  # the end of the file
            yield lineno, line, False
            return
        ended = False
        while True:  # too long: drop the rest of it in bounded pieces
            chunk = fh.readline(1 << 20)
            if not chunk or chunk.endswith(b"\n"):
                ended = bool(chunk)
                break
        yield lineno, None, ended


def walk_problem(value: Any, limit: int | None = None) -> str | None:
    """What no reader should meet anywhere in a stored value: nesting deeper than ``limit``
    (default ``MAX_DEPTH``) or an integer beyond ±2^63 (it overflows every float conversion).
    Iterative: no recursion, whatever the depth."""
    limit = MAX_DEPTH if limit is None else limit
    stack: list = [(value, 1, None)]  # (item, depth, (parent's entry, key)): the path is built only for a message
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, int) and not isinstance(item, bool):
            if not -MAX_INT <= item <= MAX_INT:
                return _path(where) + f"an integer of {len(str(abs(item)))} digits; allowed: integers within ±2^63"
            continue
        if not isinstance(item, (dict, list)):  # true/false
            continue
        if depth > limit:
            return f"JSON nested deeper than {limit} levels; allowed: at most {limit}"
        pairs = item.items() if isinstance(item, dict) else enumerate(item)
        stack.extend((c, depth + 1, (where, k)) for k, c in pairs if isinstance(c, (dict, list, int)))
    return None


def _path(where) -> str:
    """``metrics.train_wps: `` for the nested entry ``where`` points at ("" at the top)."""
    parts = []
    while where is not None:
        where, key = where
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    text = "".join(reversed(parts)).lstrip(".")
    return f"{text}: " if text else ""


class NotJson(ValueError):
    """Why a text is not usable JSON, in a few words; ``lineno``: the line of a parse error, if any."""

    def __init__(self, why: str, lineno: int | None = None):
        super().__init__(why)
        self.lineno = lineno


def loads(text: str) -> Any:
    """``json.loads`` with bounded nesting; every failure is a ``NotJson`` (a ``ValueError``) with
    a short reason."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotJson(f"not JSON ({exc.msg})", exc.lineno) from None
    except RecursionError:
        raise NotJson(f"not JSON (nested deeper than {MAX_DEPTH} levels)") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise NotJson(f"not JSON ({str(exc).splitlines()[0][:80]})") from None
    why = walk_problem(value)
    if why:
        raise NotJson(why)
    return value


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _number_problem(value: Any) -> str | None:
    """Why ``value`` (a number) cannot be used as one, or None."""
    if isinstance(value, int) and not -MAX_INT <= value <= MAX_INT:
        return f"an integer of {len(str(abs(value)))} digits; allowed: numbers within ±2^63 or floats"
    return None


def _show(value: Any) -> str:
    text = json.dumps(value, default=str) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def check_row(row: Any, where: str) -> dict:
    """``row`` if it has the shape of a result row, else a ``RowsError`` saying what is wrong. The checks
    run in this order, so a row with several faults is told its first: shape, name lengths, values, the
    bounded fields."""
    if not isinstance(row, dict):
        raise RowsError(f"{where}: expected a JSON object per line, got {type(row).__name__}")
    _check_fields(row, where)
    _check_name_lengths(row, where)
    _check_values(row, where)
    _check_bounded(row, where)
    return row


def _check_fields(row: dict, where: str) -> None:
    """The required fields there and of their type; the optional ones of theirs when set."""
    for key, kind in _REQUIRED.items():
        if key not in row:
            raise RowsError(f"{where}: row has no {key!r}; a row needs {', '.join(_REQUIRED)}")
        if not isinstance(row[key], kind):
            raise RowsError(
                f"{where}: {key}: expected {'an object' if kind is dict else 'a string'}, got {type(row[key]).__name__}"
            )
    for key in _OPTIONAL_DICTS:
        if row.get(key) is not None and not isinstance(row[key], dict):
            raise RowsError(f"{where}: {key}: expected an object, got {type(row[key]).__name__}")
    for key in _OPTIONAL_STRINGS:
        if row.get(key) is not None and not isinstance(row[key], str):
            raise RowsError(f"{where}: {key}: expected a string or null, got {type(row[key]).__name__}")


def _check_name_lengths(row: dict, where: str) -> None:
    names = [(k, row[k]) for k in ("case_id", "method", "status")]
    names += [(k, row.get(k)) for k in _OPTIONAL_STRINGS if k not in ("message", "traceback")]
    names += [(f"metrics key {k[:40]!r}", k) for k in row["metrics"]] + [(f"params key {k[:40]!r}", k) for k in row["params"]]
    names += [(f"params.{k}", v) for k, v in row["params"].items()]
    for key, text in names:
        if isinstance(text, str) and len(text) > MAX_NAME:
            raise RowsError(f"{where}: {key}: {len(text):,} characters; allowed: names up to {MAX_NAME:,}")


def _check_values(row: dict, where: str) -> None:
    """Metrics are numbers or null; parameters plain JSON scalars, finite when numbers."""
    for name, value in row["metrics"].items():
        if value is not None and not is_number(value):
            raise RowsError(f"{where}: metrics.{name}: expected a number or null, got {_show(value)}")
        why = _number_problem(value)
        if why:
            raise RowsError(f"{where}: metrics.{name}: {why}")
    for name, value in row["params"].items():
        if isinstance(value, (dict, list)):
            raise RowsError(f"{where}: params.{name}: expected a number, string, true/false or null, got {type(value).__name__}")
        why = _number_problem(value)
        if isinstance(value, float) and not math.isfinite(value):
            why = f"{value!r}; allowed: a finite number"
        if why:
            raise RowsError(f"{where}: params.{name}: {why}")


def _check_bounded(row: dict, where: str) -> None:
    """duration_s a number, round within 1..MAX_ROUNDS, and window series within MAX_WINDOWS."""
    duration = row.get("duration_s")
    if duration is not None and (not is_number(duration) or _number_problem(duration)):
        raise RowsError(f"{where}: duration_s: expected a number or null, got {_show(duration)}")
    r = row.get("round")
    if r is not None and not (isinstance(r, int) and not isinstance(r, bool) and 1 <= r <= MAX_ROUNDS):
        raise RowsError(f"{where}: round: expected a whole number from 1 to {MAX_ROUNDS} or null, got {_show(r)}")
    for name, values in (row.get("series") or {}).items():
        if name.endswith(BOUNDED_SERIES) and isinstance(values, list):
            if len(values) > MAX_WINDOWS or any(
                isinstance(v, dict) and isinstance(v.get("values"), list) and len(v["values"]) > MAX_WINDOWS for v in values
            ):
                raise RowsError(
                    f"{where}: series.{name}: more than {MAX_WINDOWS} values; allowed: at most {MAX_WINDOWS} windows or rounds"
                )


def _kinds(annotation) -> tuple | None:
    """The JSON value types a parameter field accepts, None when it says nothing simple."""
    if annotation in (int, float, str, bool, type(None)):
        return (int, float) if annotation is float else (annotation,)
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal:
        return tuple({type(a) for a in args})
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        parts = [_kinds(a) for a in args]
        return None if any(p is None for p in parts) else tuple(k for p in parts for k in p)
    return None


def check_params(row: dict, task_name: Any, grid: type | None, where: str) -> None:
    """A ``RowsError`` unless ``row["params"]`` holds every parameter the grid of task ``task_name``
    requires (``grid``: its ``Params``, whose fields the task's tables read), each of the type
    declared; ``grid`` None (a task this installation does not know) is not checked."""
    declared = getattr(grid, "model_fields", None) if grid is not None else None
    if not declared:
        return
    params = row["params"]
    required = [k for k, f in declared.items() if f.is_required()]
    for name, spec in declared.items():
        if name not in params:
            if spec.is_required():
                raise RowsError(f"{where}: params: no {name!r}; rows of task {task_name} need {', '.join(required)}")
            continue
        value, kinds = params[name], _kinds(spec.annotation)
        if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            want = " or ".join(
                sorted(
                    {
                        "a number" if k in (int, float) else "a string" if k is str else "true/false" if k is bool else "null"
                        for k in kinds
                    }
                )
            )
            raise RowsError(f"{where}: params.{name}: expected {want}, got {type(value).__name__}")

"""The one-line suite error: ``<file>:<line>: <key>: <problem>; allowed: <what is>``.

Every problem with a suite file, a profile or a ``--set`` is one ``SuiteError`` whose ``str()`` is
that line, with the line of the offending key (``KeyLines``, from the YAML node tree, so it is
the line a user should edit). ``describe`` turns one pydantic error into (problem, allowed);
``error_at`` builds the line; ``check_name`` refuses folder names that would leave ``results/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel

from posbench.core.files import PLAIN_NAME, PLAIN_NAME_ALLOWED, is_plain_name  # noqa: F401  (re-exported)
from posbench.core.outcome import PosbenchError

if TYPE_CHECKING:
    from posbench.run.suite.yaml_reader import KeyLines


class SuiteError(PosbenchError, ValueError):
    """An invalid suite or override; ``str()`` is the one line the CLI prints."""


_EXPECTED = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
    "missing": "the key is required",
}


def _unwrap(tp):
    """Strip Annotated and Optional so the container or model underneath shows."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin is Union:
            rest = [a for a in get_args(tp) if a is not type(None)]
            if len(rest) != 1:
                return tp
            tp = rest[0]
        else:
            return tp


def _model_at(model: type, loc: tuple) -> type | None:
    """The pydantic model found by following ``loc`` through fields, dict values and list items."""
    tp: Any = model
    for part in loc:
        tp = _unwrap(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if part not in tp.model_fields:
                return None
            tp = tp.model_fields[part].annotation
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        elif get_origin(tp) is list:
            tp = get_args(tp)[0]
        else:
            return None
    tp = _unwrap(tp)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None


def key_name(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<root>"


def describe(err: dict, model: type, loc: tuple) -> tuple[str, str]:
    """(problem, allowed) for one pydantic error at ``loc`` (relative to ``model``)."""
    kind, ctx = err["type"], err.get("ctx", {})
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        keys = ", ".join(parent.model_fields) if parent else "see `bench.py schema`"
        return "unknown key", keys
    if kind == "missing":
        return "missing required key", _EXPECTED["missing"]
    got = f" (got {err['input']!r})" if "input" in err and not isinstance(err["input"], (dict, list)) else ""
    problem = err["msg"].replace("Input should be", "must be").replace("Value should have", "must have") + got
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == PLAIN_NAME:
        return f"not a plain folder name{got}", PLAIN_NAME_ALLOWED
    if kind == "value_error":  # a validator's own line: "<problem>; allowed: <what>"
        problem, _, allowed = err["msg"].removeprefix("Value error, ").partition("; allowed: ")
        return problem, allowed or "see `bench.py schema`"
    if kind == "literal_error":
        return problem, str(ctx.get("expected"))
    if kind in _EXPECTED:
        return problem, _EXPECTED[kind]
    for bound in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
        if bound in ctx:
            sign = {
                "ge": ">=",
                "gt": ">",
                "le": "<=",
                "lt": "<",
                "min_length": "length >=",
                "max_length": "length <=",
                "pattern": "matching",
            }[bound]
            return problem, f"{sign} {ctx[bound]}"
    return problem, "see `bench.py schema`"


def error_at(where: str, lines: KeyLines | None, path: tuple, problem: str, allowed: str) -> SuiteError:
    line = f":{lines.line(path)}" if lines is not None else ""
    return SuiteError(f"{where}{line}: {key_name(path)}: {problem}; allowed: {allowed}")


def check_name(value: str, what: str) -> str:
    """``value`` if it is a plain folder name (suite name, run id), else a one-line SuiteError."""
    if not is_plain_name(value):
        raise SuiteError(f"{what}: {value!r}: not a plain folder name; allowed: {PLAIN_NAME_ALLOWED}")
    return value

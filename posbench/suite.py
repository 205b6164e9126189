"""Suite files: load the YAML, validate it, resolve a profile, expand the cases.

Every problem is one ``SuiteError`` whose message is a single line
``<file>:<line>: <key>: <problem>; allowed: <what is>``, with the line of the offending key
(taken from the YAML node tree, so it is the line a user should edit). Validation happens in
full before anything runs or is written, and covers every profile, so ``bench.py validate``
catches a mistake in the ``gpu`` profile on a laptop.

Layers: ``SuiteFile`` (pydantic, strict, ``extra="forbid"``) checks the shape of the file; the
task's ``Settings`` checks the merged settings (file, then profile, then ``--set``); the task's
``Params`` checks every grid value; the method registry checks method names.
"""
from __future__ import annotations

import difflib
import itertools
import json
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter
from pydantic import ValidationError

from . import builtin_dir, tasks
from .case import Case

SUITES_DIR = builtin_dir("suites")  # the checkout's suites/, or posbench/suites/ in a wheel
# The profile a device picks when --profile is not given.
PROFILE_FOR_DEVICE = {"cpu": "cpu", "cuda": "gpu"}
DEFAULT_PROFILE = "default"  # the name used when a suite has no profile for the device

Scalar = Union[StrictInt, StrictFloat, StrictStr, StrictBool]


class SuiteError(ValueError):
    """An invalid suite or override; ``str()`` is the one line the CLI prints."""


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    description: str = ""
    settings: dict[str, Any] = Field(default_factory=dict, description="overrides of the suite's settings")
    grid: Optional[dict[str, Annotated[list[Scalar], Field(min_length=1)]]] = Field(
        None, min_length=1, description="replaces the suite's grid axes it names"
    )


class SuiteFile(BaseModel):
    """The schema of ``suites/*.yaml`` (``bench.py schema`` prints it as JSON Schema)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="results go to results/<name>/")
    description: str
    version: int = Field(ge=1, description="bump when a change makes old results incomparable")
    task: str = Field(description="a task from posbench.tasks, e.g. efficiency")
    methods: list[str] = Field(min_length=1, description="method names from the registry")
    baseline: Optional[str] = Field(None, description="the method ratios are taken against; one of methods")
    metrics: list[str] = Field(default_factory=list, description="metrics shown in tables and progress lines")
    grid: dict[str, Annotated[list[Scalar], Field(min_length=1)]] = Field(
        min_length=1, description="axis -> values; cases are methods x the cartesian product of the axes"
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="validated against the task's Settings")
    profiles: dict[str, Profile] = Field(default_factory=dict, description="e.g. cpu, gpu")


@dataclass
class Suite:
    """A validated suite with one profile applied: what the runner needs."""

    path: Path
    name: str
    description: str
    version: int
    task: str
    methods: list[str]
    baseline: Optional[str]
    metrics: list[str]
    grid: dict[str, list[Any]]
    settings: BaseModel  # the task's Settings
    profile: str
    profiles: list[str] = field(default_factory=list)

    def cases(self, device: str, run_id: str = "", methods_dirs: list[str] | None = None) -> list[Case]:
        """Grid points outer, methods inner: an interrupted run has every method at the first points."""
        axes = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[a] for a in axes)):
            for method in self.methods:
                out.append(
                    Case(
                        suite=self.name,
                        task=self.task,
                        method=method,
                        params=dict(zip(axes, values)),
                        settings=self.settings.model_dump(),
                        device=device,
                        profile=self.profile,
                        run_id=run_id,
                        methods_dirs=list(methods_dirs or []),
                    )
                )
        return out

    def fingerprint(self) -> str:
        """Hash of what makes results comparable: settings and grid (not the method list)."""
        settings = self.settings.model_dump()
        if settings.get("nproc") == 1:
            # nproc came later: leaving its default out keeps the ids of earlier runs (resume).
            del settings["nproc"]
        blob = json.dumps(
            {"version": self.version, "task": self.task, "settings": settings, "grid": self.grid},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


# ---------------------------------------------------------------------------------------------
# YAML with line numbers and no duplicate keys


class SuiteLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise SuiteError(f"{self.name}:{line}: {key}: duplicate key (first at line {seen[key]})")
            seen.setdefault(key, line)
        return super().construct_mapping(node, deep)


def _key_lines(node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Map key paths (``("settings", "warmup_steps")``, ``("methods", 2)``) to 1-based lines."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            sub = path + (key_node.value,)
            out[sub] = key_node.start_mark.line + 1
            _key_lines(value_node, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out[path + (i,)] = item.start_mark.line + 1
            _key_lines(item, path + (i,), out)
    return out


def _parse(text: str, where: str) -> tuple[Any, dict[tuple, int]]:
    loader = None
    try:
        loader = SuiteLoader(text)  # the reader rejects unprintable characters already here
        loader.name = where
        node = loader.get_single_node()
        if node is None:
            raise SuiteError(f"{where}:1: <root>: the file is empty; allowed: a mapping of suite keys")
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        raise SuiteError(f"{where}:{line}: <yaml>: invalid YAML: {problem}; allowed: YAML 1.1 syntax") from None
    except yaml.YAMLError as exc:  # e.g. a character YAML does not allow; no mark to point at
        problem = " ".join(str(exc).split())
        raise SuiteError(f"{where}:1: <yaml>: invalid YAML: {problem}; allowed: YAML 1.1 syntax") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, _key_lines(node)


# ---------------------------------------------------------------------------------------------
# Turning pydantic errors into one line

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


def _model_at(model: type, loc: tuple) -> Optional[type]:
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


def _describe(err: dict, model: type, loc: tuple) -> tuple[str, str]:
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
    if kind == "literal_error":
        return problem, str(ctx.get("expected"))
    if kind in _EXPECTED:
        return problem, _EXPECTED[kind]
    for bound in ("ge", "gt", "le", "lt", "min_length", "max_length", "pattern"):
        if bound in ctx:
            sign = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=",
                    "max_length": "length <=", "pattern": "matching"}[bound]
            return problem, f"{sign} {ctx[bound]}"
    return problem, "see `bench.py schema`"


def _line(lines: dict[tuple, int], path: tuple) -> int:
    """Line of the longest prefix of ``path`` that the file has (a missing key: its parent)."""
    for n in range(len(path), -1, -1):
        if path[:n] in lines:
            return lines[path[:n]]
    return 1


def _fail(where: str, lines: dict | None, path: tuple, problem: str, allowed: str) -> SuiteError:
    line = f":{_line(lines, path)}" if lines is not None else ""
    return SuiteError(f"{where}{line}: {key_name(path)}: {problem}; allowed: {allowed}")


# ---------------------------------------------------------------------------------------------
# Loading


def find(ref: str | Path) -> Path:
    """A suite by name (``efficiency`` -> suites/efficiency.yaml) or by path."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise SuiteError(f"{path}: no such file; allowed: a suite name ({', '.join(names())}) or a path")
        return path
    candidate = SUITES_DIR / f"{ref}.yaml"
    if candidate.is_file():
        return candidate
    close = difflib.get_close_matches(str(ref), names(), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise SuiteError(f"no such suite {str(ref)!r}{hint}; allowed: a suite name ({', '.join(names())}) or a path")


def display_path(path: Path) -> str:
    """The path as the user would type it: relative to the current folder when below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def names() -> list[str]:
    return sorted(p.stem for p in SUITES_DIR.glob("*.yaml"))


@dataclass
class Loaded:
    """A suite file that passed the schema, with its key lines for later messages."""

    path: Path
    file: SuiteFile
    lines: dict[tuple, int]
    task: Any  # the task module


def load(ref: str | Path) -> Loaded:
    """Parse and check the file in full (every profile); raises ``SuiteError``."""
    path = find(ref)
    where = display_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{where}: <file>: cannot read ({type(exc).__name__}); allowed: a UTF-8 YAML file") from None
    data, lines = _parse(text, where)
    if not isinstance(data, dict):
        raise _fail(where, lines, (), f"the file must be a mapping, got {type(data).__name__}", "a mapping of suite keys: "
                    + ", ".join(SuiteFile.model_fields))
    try:
        file = SuiteFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        problem, allowed = _describe(err, SuiteFile, loc)
        raise _fail(where, lines, loc, problem, allowed) from None
    loaded = Loaded(path, file, lines, None)
    loaded.task = _check_task(loaded)
    _check_methods(loaded, loaded.task)
    for profile in [DEFAULT_PROFILE] + list(file.profiles):
        resolve(loaded, profile)
    return loaded


def _check_task(loaded: Loaded):
    try:
        return tasks.get(loaded.file.task)
    except KeyError:
        raise _fail(display_path(loaded.path), loaded.lines, ("task",), f"unknown task {loaded.file.task!r}",
                    ", ".join(tasks.names())) from None


def _check_methods(loaded: Loaded, task=None) -> None:
    from . import registry

    f, where = loaded.file, display_path(loaded.path)
    own = getattr(task, "METHODS", None)  # a task that compares other things (kernel variants)
    for i, name in enumerate(f.methods):
        if own is not None:
            if name not in own:
                close = difflib.get_close_matches(name, list(own), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise _fail(where, loaded.lines, ("methods", i), f"unknown {f.task} variant {name!r}{hint}",
                            ", ".join(own))
            continue
        try:
            registry.require(name)  # reads the method files: no torch import
        except registry.RegistryError as exc:
            problem = str(exc).split("; known methods:")[0]
            raise _fail(where, loaded.lines, ("methods", i), problem, ", ".join(registry.names())) from None
        if name in f.methods[:i]:
            raise _fail(where, loaded.lines, ("methods", i), f"{name!r} is listed twice", "each method once")
    if f.baseline is not None and f.baseline not in f.methods:
        raise _fail(where, loaded.lines, ("baseline",), f"{f.baseline!r} is not in methods", ", ".join(f.methods))
    unknown = [m for m in f.metrics if m not in loaded.task.METRICS]
    if unknown:
        i = f.metrics.index(unknown[0])
        raise _fail(where, loaded.lines, ("metrics", i), f"unknown metric {unknown[0]!r}",
                    ", ".join(loaded.task.METRICS))


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["warmup_steps=3", "grid.seq_len=[64, 128]"]`` -> ``{key: YAML-parsed value}``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SuiteError(f"--set {item}: <key>: expected key=value; allowed: a settings key or grid.<axis>")
        try:
            out[key.strip()] = yaml.safe_load(value) if value.strip() else ""
        except yaml.YAMLError as exc:
            raise SuiteError(f"--set {item}: {key}: value is not YAML ({' '.join(str(exc).split())}); "
                             "allowed: a YAML scalar or [list]") from None
    return out


def resolve(loaded: Loaded, profile: str, sets: dict[str, Any] | None = None) -> Suite:
    """Apply ``profile`` (or none: ``default``) and ``--set`` overrides, validate, return a Suite."""
    f, where, lines, task = loaded.file, display_path(loaded.path), loaded.lines, loaded.task
    if profile != DEFAULT_PROFILE and profile not in f.profiles:
        raise SuiteError(f"{where}: profiles: no profile {profile!r}; allowed: "
                         f"{', '.join(list(f.profiles) or ['(none defined)'])}")
    prof = f.profiles.get(profile, Profile())
    # Each settings key remembers where its value came from, so an error points at that line.
    merged: dict[str, Any] = {}
    source: dict[str, tuple] = {}
    for key, value in f.settings.items():
        merged[key], source[key] = value, ("settings", key)
    for key, value in prof.settings.items():
        merged[key], source[key] = value, ("profiles", profile, "settings", key)
    grid = {axis: list(values) for axis, values in f.grid.items()}
    grid_source = {axis: ("grid", axis) for axis in grid}
    for axis, values in (prof.grid or {}).items():
        grid[axis], grid_source[axis] = list(values), ("profiles", profile, "grid", axis)
    for key, value in (sets or {}).items():
        if key.startswith("grid."):
            axis = key[len("grid."):]
            grid[axis] = value if isinstance(value, list) else [value]
            grid_source[axis] = ("--set", key)
        else:
            merged[key], source[key] = value, ("--set", key)

    def fail(path: tuple, problem: str, allowed: str) -> SuiteError:
        if path and path[0] == "--set":
            return SuiteError(f"--set {path[1]}: {key_name(path[2:]) if path[2:] else path[1]}: {problem}; "
                              f"allowed: {allowed}")
        return _fail(where, lines, path, problem, allowed)

    try:
        settings = task.Settings.model_validate(merged)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        problem, allowed = _describe(err, task.Settings, loc)
        base = source.get(loc[0], ("settings", loc[0])) if loc else ("settings",)
        raise fail(base + loc[1:], problem, allowed) from None
    _check_grid(grid, grid_source, task.Params, fail)
    return Suite(
        path=loaded.path, name=f.name, description=f.description, version=f.version, task=f.task,
        methods=list(f.methods), baseline=f.baseline, metrics=list(f.metrics), grid=grid,
        settings=settings, profile=profile, profiles=list(f.profiles),
    )


def _check_grid(grid: dict, source: dict, params: type, fail) -> None:
    fields = params.model_fields
    for axis, values in grid.items():
        if axis not in fields:
            raise fail(source[axis], "unknown grid axis", ", ".join(fields))
        if not values:
            raise fail(source[axis], "empty list of values", "at least one value")
        info = fields[axis]
        spec = Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation
        adapter = TypeAdapter(spec)
        for i, value in enumerate(values):
            try:
                adapter.validate_python(value, strict=True)
            except ValidationError as exc:
                err = exc.errors()[0]
                problem, allowed = _describe(err, params, ())
                raise fail(source[axis] + (i,), problem, allowed) from None
    missing = [a for a, info in fields.items() if info.is_required() and a not in grid]
    if missing:
        raise fail(("grid",), f"missing grid axis {missing[0]!r}", ", ".join(fields))


def schema() -> dict:
    """JSON Schema of suite files, with each public task's settings and grid point under $defs."""
    out = SuiteFile.model_json_schema()
    defs = out.setdefault("$defs", {})
    for name in tasks.names():
        task = tasks.get(name)
        defs[f"{name}.Settings"] = task.Settings.model_json_schema()
        defs[f"{name}.Params"] = task.Params.model_json_schema()
    return out

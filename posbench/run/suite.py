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

import ast
import difflib
import hashlib
import inspect
import itertools
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter
from pydantic import ValidationError

from posbench import builtin_dir
from posbench.core import task as tasks
from posbench.core.case import Case

SUITES_DIR = builtin_dir("suites")  # the checkout's suites/, or posbench/suites/ in a wheel
# The profile a device picks when --profile is not given.
PROFILE_FOR_DEVICE = {"cpu": "cpu", "cuda": "gpu"}
DEFAULT_PROFILE = "default"  # the name used when a suite has no profile for the device

Scalar = Union[StrictInt, StrictFloat, StrictStr, StrictBool]
# Suite names and run ids become folder names under results/: one plain path component, never
# ".", "..", a hidden name or anything with a separator.
PLAIN_NAME = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
PLAIN_NAME_ALLOWED = "letters, digits, _ . - (not starting with . or -), at most 100 characters"


class SuiteError(ValueError):
    """An invalid suite or override; ``str()`` is the one line the CLI prints."""


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    description: str = ""
    methods: Optional[list[str]] = Field(None, min_length=1, description="replaces the suite's methods "
                                         "(`all`: every registered method)")
    settings: dict[str, Any] = Field(default_factory=dict, description="overrides of the suite's settings")
    grid: Optional[dict[str, Annotated[list[Scalar], Field(min_length=1)]]] = Field(
        None, min_length=1, description="replaces the suite's grid axes it names"
    )


class SuiteFile(BaseModel):
    """The schema of ``suites/*.yaml`` (``bench.py schema`` prints it as JSON Schema)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=PLAIN_NAME, max_length=100, description="results go to results/<name>/")
    description: str
    version: int = Field(ge=1, description="bump when a change makes old results incomparable")
    task: str = Field(description="a task from posbench.core.task, e.g. efficiency")
    methods: list[str] = Field(min_length=1, description="method names from the registry, or `all`")
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
# YAML with line numbers, no duplicate keys, and bounded cost
#
# A suite is data: it is read with a safe loader (no tags that build objects) and every way a
# small file can make the loader or the validator do a lot of work is capped before that work:
# the file size, the node count after alias expansion (an "alias bomb" is a few nested anchors
# that expand to billions of nodes), the digits of an integer and the nesting depth.

MAX_FILE_BYTES = 1 << 20  # 1 MiB; the shipped suites are a few KiB
MAX_NODES = 100_000  # YAML nodes after every alias is expanded
MAX_INT_DIGITS = 30  # a 64-bit integer has at most 20 digits; longer ones are refused unparsed
INT_LIMIT = 2**63  # integers must fit in a signed 64-bit int (seeds, sizes)
MERGE_TAG = "tag:yaml.org,2002:merge"


class _YamlProblem(Exception):
    """A problem found while reading YAML: (1-based line, key, problem, allowed)."""

    def __init__(self, line: int, key: str, problem: str, allowed: str):
        super().__init__(problem)
        self.line, self.key, self.problem, self.allowed = line, key, problem, allowed


# libyaml's parser when PyYAML was built with it (about 10x faster than the pure-Python one, so
# the size cap is reached in well under a second); the constructor, and so every rule here, is
# the same Python code either way.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SuiteLoader(_SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML keeps the last silently), non-scalar keys
    and over-long integers. Merge keys (``<<: *base``, YAML 1.1) are supported: the merged keys
    come first and the mapping's own keys override them, as the YAML spec says."""

    def construct_mapping(self, node, deep=False):
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            line = key_node.start_mark.line + 1
            if key_node.tag == MERGE_TAG:
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                kind = "mapping" if isinstance(key_node, yaml.MappingNode) else "list"
                raise _YamlProblem(line, "<yaml>", f"a {kind} used as a mapping key", "plain keys such as seq_len")
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise _YamlProblem(line, str(key), f"duplicate key (first at line {seen[key]})",
                                   "each key once per mapping")
            seen[key] = line
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node):
        digits = node.value.replace("_", "").lstrip("+-")
        if len(digits) > MAX_INT_DIGITS:
            raise _YamlProblem(node.start_mark.line + 1, "<yaml>", f"an integer of {len(digits)} digits",
                               f"integers of at most {MAX_INT_DIGITS} digits")
        return super().construct_yaml_int(node)


SuiteLoader.add_constructor("tag:yaml.org,2002:int", SuiteLoader.construct_yaml_int)


def _expanded_size(root) -> int:
    """Nodes of the tree with every alias expanded, counted without expanding (shared nodes are
    counted once per use from a memo); stops at ``MAX_NODES + 1``. A node that contains itself
    (``&a [*a]``) raises ``_YamlProblem``."""
    memo: dict[int, int] = {}
    active: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in memo:
            return memo[key]
        if key in active:
            raise _YamlProblem(node.start_mark.line + 1, "<yaml>", "an alias refers to a node that contains it",
                               "aliases of complete, non-recursive nodes")
        active.add(key)
        total = 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        for child in children:
            total += size(child)
            if total > MAX_NODES:
                break
        active.discard(key)
        memo[key] = min(total, MAX_NODES + 1)
        return memo[key]

    return size(root)


class KeyLines:
    """The 1-based line of a key path (``("settings", "warmup_steps")``, ``("methods", 2)``), found
    by walking the node tree down that path when a message needs it: linear in the file, with
    nothing built up front. A path that does not exist gives the line of its longest prefix."""

    def __init__(self, root):
        self.root = root

    def line(self, path: tuple) -> int:
        node, line = self.root, self.root.start_mark.line + 1
        for part in path:
            found = None
            if isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:  # merges are flattened in: the last one wins
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(part):
                        found = key_node.start_mark.line + 1, value_node
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                item = node.value[part]
                found = item.start_mark.line + 1, item
            if found is None:
                break
            line, node = found
        return line


def _load_yaml(text: str) -> tuple[Any, Any]:
    """(data, root node) of one YAML document; ``_YamlProblem`` for anything wrong with it."""
    loader = None
    try:
        loader = SuiteLoader(text)  # the reader rejects unprintable characters already here
        node = loader.get_single_node()
        if node is None:
            return None, None
        if _expanded_size(node) > MAX_NODES:
            raise _YamlProblem(node.start_mark.line + 1, "<yaml>",
                               f"aliases expand to more than {MAX_NODES} nodes",
                               "aliases that keep the expanded document small (an alias bomb is refused)")
        return loader.construct_document(node), node
    except RecursionError:  # composing, counting or constructing a deeply nested document
        raise _YamlProblem(1, "<yaml>", "nesting too deep", "a few levels of mappings and lists") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = " ".join(str(exc.problem or exc.context or "invalid YAML").split())
        raise _YamlProblem(mark.line + 1 if mark else 1, "<yaml>", f"invalid YAML: {problem}",
                           "YAML 1.1 syntax") from None
    except yaml.YAMLError as exc:  # e.g. a character YAML does not allow; no mark to point at
        raise _YamlProblem(1, "<yaml>", f"invalid YAML: {' '.join(str(exc).split())}", "YAML 1.1 syntax") from None
    finally:
        if loader is not None:
            loader.dispose()


def _parse(text: str, where: str) -> tuple[Any, KeyLines]:
    try:
        data, node = _load_yaml(text)
    except _YamlProblem as p:
        raise SuiteError(f"{where}:{p.line}: {p.key}: {p.problem}; allowed: {p.allowed}") from None
    if node is None:
        raise SuiteError(f"{where}:1: <root>: the file is empty; allowed: a mapping of suite keys")
    return data, KeyLines(node)


def _bad_number(value: Any, path: tuple = ()) -> tuple[tuple, str, str] | None:
    """The first (path, problem, allowed) of a non-finite float or an integer beyond 64 bits in
    ``value`` (settings, grid values): ``lr: .inf`` would pass a ``gt=0`` bound and fail only when
    the row is written, and a seed beyond 64 bits only when torch is seeded."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return path, f"non-finite number {value}", "finite numbers"
    if isinstance(value, int) and not -INT_LIMIT <= value < INT_LIMIT:
        return path, f"integer {value} does not fit in 64 bits", "-2**63 <= n < 2**63"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        bad = _bad_number(item, path + (key,))
        if bad:
            return bad
    return None


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
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == PLAIN_NAME:
        return f"not a plain folder name{got}", PLAIN_NAME_ALLOWED
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


def _fail(where: str, lines: KeyLines | None, path: tuple, problem: str, allowed: str) -> SuiteError:
    line = f":{lines.line(path)}" if lines is not None else ""
    return SuiteError(f"{where}{line}: {key_name(path)}: {problem}; allowed: {allowed}")


# ---------------------------------------------------------------------------------------------
# Loading


def check_name(value: str, what: str) -> str:
    """``value`` if it is a plain folder name (suite name, run id), else a one-line SuiteError."""
    if not (isinstance(value, str) and len(value) <= 100 and re.fullmatch(PLAIN_NAME, value)):
        raise SuiteError(f"{what}: {value!r}: not a plain folder name; allowed: {PLAIN_NAME_ALLOWED}")
    return value


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
    lines: KeyLines
    task: Any  # the task module


def load(ref: str | Path) -> Loaded:
    """Parse and check the file in full (every profile); raises ``SuiteError``."""
    path = find(ref)
    where = display_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:  # refused before reading: a suite is a few KiB
            raise SuiteError(f"{where}: <file>: the file is {size} bytes; allowed: at most {MAX_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{where}: <file>: cannot read ({type(exc).__name__}); allowed: a UTF-8 YAML file") from None
    data, lines = _parse(text, where)
    _method_group_as_list(data)
    if not isinstance(data, dict):
        raise _fail(where, lines, (), f"the file must be a mapping, got {type(data).__name__}", "a mapping of suite keys: "
                    + ", ".join(SuiteFile.model_fields))
    bad = _bad_number(data)
    if bad:
        raise _fail(where, lines, *bad)
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


def _method_group_as_list(data) -> None:
    """``methods: all`` (a group name, not a list) reads as ``methods: [all]``, in profiles too."""
    if not isinstance(data, dict):
        return
    profiles = data.get("profiles")
    holders = [data] + ([p for p in profiles.values() if isinstance(p, dict)] if isinstance(profiles, dict) else [])
    for holder in holders:
        if holder.get("methods") == "all":  # registry.GROUPS, without importing torch yet
            holder["methods"] = [holder["methods"]]


def expand_methods(names: list[str], task=None) -> list[str]:
    """Method names with the group ``all`` expanded: every registered method, or every variant of
    a task that compares its own (``task.METHODS``)."""
    from posbench.core import registry

    if task is not None and task.own_methods and "all" in names:
        return [n for n in names if n != "all"] + [n for n in task.METHODS if n not in names]
    return registry.expand(names)


def _check_task(loaded: Loaded):
    try:
        return tasks.get(loaded.file.task)
    except KeyError:
        raise _fail(display_path(loaded.path), loaded.lines, ("task",), f"unknown task {loaded.file.task!r}",
                    ", ".join(tasks.names())) from None


def _check_methods(loaded: Loaded, task=None) -> None:
    f, where = loaded.file, display_path(loaded.path)
    own = task.METHODS if task is not None else None  # a task that compares other things (kernel variants)
    _check_method_list(loaded, f.methods, (), own)
    for name, prof in f.profiles.items():
        if prof.methods is not None:
            _check_method_list(loaded, prof.methods, ("profiles", name), own)
    if f.baseline is not None and f.baseline not in expand_methods(f.methods, task):
        raise _fail(where, loaded.lines, ("baseline",), f"{f.baseline!r} is not in methods", ", ".join(f.methods))
    unknown = [m for m in f.metrics if m not in loaded.task.METRICS]
    if unknown:
        i = f.metrics.index(unknown[0])
        raise _fail(where, loaded.lines, ("metrics", i), f"unknown metric {unknown[0]!r}",
                    ", ".join(loaded.task.METRICS))


def _check_method_list(loaded: Loaded, names: list[str], prefix: tuple, own) -> None:
    """Each name is a registered method (or a task variant), or a group (``all``); none twice."""
    from posbench.core import registry

    f, where = loaded.file, display_path(loaded.path)
    for i, name in enumerate(names):
        path = prefix + ("methods", i)
        if name in names[:i]:
            raise _fail(where, loaded.lines, path, f"{name!r} is listed twice", "each method once")
        if name in registry.GROUPS:
            continue
        if own is not None:
            if name not in own:
                close = difflib.get_close_matches(name, list(own), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise _fail(where, loaded.lines, path, f"unknown {f.task} variant {name!r}{hint}", ", ".join(own))
            continue
        try:
            registry.require(name)  # reads the method files: no torch import
        except registry.RegistryError as exc:
            problem = str(exc).split("; known methods:")[0]
            raise _fail(where, loaded.lines, path, problem, ", ".join(registry.names() + list(registry.GROUPS))) from None


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["warmup_steps=3", "grid.seq_len=[64, 128]"]`` -> ``{key: YAML-parsed value}``. Values
    are read with the suite file's loader, so they meet the same rules (no duplicate keys in an
    inline mapping, no alias bombs, finite numbers, 64-bit integers)."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SuiteError(f"--set {item}: <key>: expected key=value; allowed: a settings key or grid.<axis>")
        if len(value) > MAX_FILE_BYTES:
            raise SuiteError(f"--set {key}: {key}: value of {len(value)} characters; allowed: at most {MAX_FILE_BYTES}")
        try:
            parsed = _load_yaml(value)[0] if value.strip() else ""
        except _YamlProblem as p:
            if p.key == "<yaml>":
                raise SuiteError(f"--set {item}: {key}: value is not YAML ({p.problem}); "
                                 f"allowed: a YAML scalar, [list] or {{mapping}}") from None
            raise SuiteError(f"--set {key}: {key}.{p.key}: {p.problem}; allowed: {p.allowed}") from None
        bad = _bad_number(parsed)
        if bad:
            path, problem, allowed = bad
            raise SuiteError(f"--set {key}: {key_name((key,) + path)}: {problem}; allowed: {allowed}")
        if key in out:
            raise SuiteError(f"--set {key}: {key}: set twice; allowed: each key once")
        out[key] = parsed
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
            return SuiteError(f"--set {path[1]}: {key_name(path[1:])}: {problem}; "
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
    _check_across(settings, source, grid, grid_source, list(f.methods), task, fail)
    return Suite(
        path=loaded.path, name=f.name, description=f.description, version=f.version, task=f.task,
        methods=expand_methods(prof.methods or f.methods, task), baseline=f.baseline, metrics=list(f.metrics), grid=grid,
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
            if value in values[:i]:  # the same case would run twice
                raise fail(source[axis] + (i,), f"{value!r} is listed twice", "each value once per axis")
    missing = [a for a, info in fields.items() if info.is_required() and a not in grid]
    if missing:
        raise fail(("grid",), f"missing grid axis {missing[0]!r}", ", ".join(fields))


def _options_from_source(path: Path, method: str) -> list[str] | None | bool:
    """The keyword options of ``method``'s constructor read from its file without running it
    (validation imports no torch): the ``@register`` class whose ``name`` is ``method``, its own
    ``__init__`` or, with none and ``PositionMethod`` as its only base, no options. None: it takes
    ``**kwargs``. False: the source does not say (the caller imports the class instead)."""
    from posbench.core import registry

    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ClassDef) and registry._class_name(node) == method):
            continue
        init = next((s for s in node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
        if init is None:
            plain = [b for b in node.bases if not (isinstance(b, ast.Name) and b.id == "PositionMethod")]
            return False if plain else []
        if init.args.kwarg is not None:
            return None
        return [a.arg for a in init.args.args[2:]] + [a.arg for a in init.args.kwonlyargs]  # after self, cfg
    return False


def constructor_options(method: str) -> list[str] | None:
    """The options ``method_options`` may give ``method`` (its constructor's keyword parameters
    after ``cfg``), None when it takes any keyword."""
    from posbench.core import registry

    found = _options_from_source(Path(registry.require(method)), method)
    if found is not False:
        return found
    params = inspect.signature(registry.get(method).__init__).parameters  # imports the method file
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return [p for p in params if p not in ("self", "cfg")
            and params[p].kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]


def _check_across(settings: BaseModel, source: dict, grid: dict, grid_source: dict, methods: list[str], task,
                  fail) -> None:
    """Checks that need several keys at once (each field alone passed its own bounds), so that
    no such mistake waits for a worker to find it."""
    tokens = getattr(settings, "tokens_per_step", None)
    if tokens is not None:
        for i, seq_len in enumerate(grid.get("seq_len", [])):
            if seq_len > tokens:  # the batch (tokens_per_step // seq_len) would be empty
                raise fail(grid_source["seq_len"] + (i,), f"seq_len {seq_len} is longer than tokens_per_step {tokens}",
                           f"seq_len <= tokens_per_step ({tokens}), or a larger tokens_per_step")
    preset, overrides = getattr(settings, "model", None), getattr(settings, "model_overrides", None)
    if preset is not None and overrides:
        from posbench.core.config import model_config

        try:
            model_config(preset, **overrides)
        except (ValueError, TypeError) as exc:
            problem = str(exc).removeprefix("model config: ")
            raise fail(source.get("model_overrides", ("settings", "model_overrides")), problem,
                       "overrides that give a valid model (positive sizes, d_model divisible by n_heads)") from None
    options = getattr(settings, "method_options", None)
    if options and not task.own_methods:
        base = source.get("method_options", ("settings", "method_options"))
        for method, opts in options.items():
            if method not in methods:
                raise fail(base + (method,), f"options for {method!r}, which is not in methods",
                           ", ".join(methods))
            allowed = constructor_options(method)
            if allowed is None:
                continue  # the constructor takes any keyword
            for option in opts:
                if option not in allowed:
                    raise fail(base + (method, option), f"{method} takes no option {option!r}",
                               ", ".join(allowed) or f"none ({method} takes no options)")


def schema() -> dict:
    """JSON Schema of suite files, saying what ``bench.py validate`` says about keys, so an editor
    flags a misspelt setting (``tokens_per_stp``) or grid axis as it is typed.

    For each public task: ``$defs`` holds ``<task>.Settings`` and ``<task>.Params`` (the pydantic
    models), ``<task>.SuiteSettings`` (the same keys, none required: a profile may supply what the
    suite leaves out) and ``<task>.Grid`` (its axes, each a non-empty list of the axis's values);
    and ``allOf`` holds, per task, ``if task is <task> then`` the suite's and every profile's
    ``settings`` and ``grid`` follow those, rejecting any other key. What needs several keys at
    once (a required setting, seq_len <= tokens_per_step, method options) stays with ``validate``.
    """
    out = SuiteFile.model_json_schema()
    defs = out.setdefault("$defs", {})
    # `methods: all` (the group, not a list) is read as [all] before validation (_method_group_as_list)
    group = {"const": "all", "description": "every registered method (or every variant of the task)"}
    out["properties"]["methods"] = {"anyOf": [out["properties"]["methods"], group],
                                    "description": out["properties"]["methods"].get("description", "")}
    defs["Profile"]["properties"]["methods"]["anyOf"].append(group)
    branches = []
    for name in tasks.names():
        task = tasks.get(name)
        settings = _hoisted(task.Settings.model_json_schema(), f"{name}.", defs)
        params = _hoisted(task.Params.model_json_schema(), f"{name}.", defs)
        defs[f"{name}.Settings"] = settings
        defs[f"{name}.Params"] = params
        defs[f"{name}.SuiteSettings"] = {
            "title": f"{name} settings", "type": "object", "properties": settings["properties"],
            "additionalProperties": False,
            "description": f"settings of the {name} task (a suite's, or a profile's overrides)"}
        defs[f"{name}.Grid"] = {
            "title": f"{name} grid", "type": "object", "additionalProperties": False,
            "properties": {axis: {"type": "array", "minItems": 1, "items": spec}
                           for axis, spec in params["properties"].items()},
            "description": f"grid axes of the {name} task: {', '.join(params['properties'])}"}
        own = {"settings": {"$ref": f"#/$defs/{name}.SuiteSettings"}, "grid": {"$ref": f"#/$defs/{name}.Grid"}}
        branches.append({
            "if": {"properties": {"task": {"const": name}}, "required": ["task"]},
            "then": {"properties": {**own, "profiles": {"additionalProperties": {"properties": own}}}},
        })
    out["allOf"] = branches
    return out


def _hoisted(model_schema: dict, prefix: str, defs: dict) -> dict:
    """``model_schema`` with its own ``$defs`` moved into ``defs`` under ``prefix`` and every
    ``$ref`` to them rewritten, so it can live inside another document's ``$defs``."""
    own = model_schema.pop("$defs", {})
    renamed = {f"#/$defs/{key}": f"#/$defs/{prefix}{key}" for key in own}

    def rewrite(node):
        if isinstance(node, dict):
            return {k: renamed.get(v, v) if k == "$ref" else rewrite(v) for k, v in node.items()}
        if isinstance(node, list):
            return [rewrite(v) for v in node]
        return node

    for key, value in own.items():
        defs[f"{prefix}{key}"] = rewrite(value)
    return rewrite(model_schema)

"""Suite files: load the YAML, validate it in full (every profile) before anything runs, resolve a
profile and ``--set`` into a ``Suite`` that holds its task, expand the cases. Layers: the YAML
(``yaml_reader``), the file's shape (``SuiteFile``), the task's ``Settings`` and ``Params``, the
method registry and ``method_options``; every problem is one ``SuiteError`` line.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, TypeAdapter, ValidationError

from posbench import tasks
from posbench.core.builtin import builtin_dir
from posbench.core.case import CaseSpec
from posbench.core.task import Task
from posbench.run.suite.cross_checks import Methods, check_across
from posbench.run.suite.launcher import Launcher
from posbench.run.suite.suite_errors import PLAIN_NAME, SuiteError, describe, error_at, key_name
from posbench.run.suite.yaml_reader import MAX_FILE_BYTES, KeyLines, YamlProblem, bad_number, load_yaml

SUITES_DIR = builtin_dir("suites")  # the checkout's suites/, or posbench/suites/ in a wheel
# The profile a device picks when --profile is not given.
PROFILE_FOR_DEVICE = {"cpu": "cpu", "cuda": "gpu"}
DEFAULT_PROFILE = "default"  # the name used when a suite has no profile for the device

Scalar = Union[StrictInt, StrictFloat, StrictStr, StrictBool]  # noqa: UP007  (a runtime alias, read by pydantic: Union keeps its forward references)


class Profile(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    description: str = ""
    methods: list[str] | None = Field(
        None, min_length=1, description="replaces the suite's methods (`all`: every registered method)"
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="overrides of the suite's settings")
    grid: dict[str, Annotated[list[Scalar], Field(min_length=1)]] | None = Field(
        None, min_length=1, description="replaces the suite's grid axes it names"
    )
    launcher: dict[str, Any] | None = Field(None, description="overrides of the suite's launcher keys")


class SuiteFile(BaseModel):
    """The schema of ``suites/*.yaml`` (``bench.py schema`` prints it as JSON Schema)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(pattern=PLAIN_NAME, max_length=100, description="results go to results/<name>/")
    description: str
    version: int = Field(ge=1, description="bump when a change makes old results incomparable")
    task: str = Field(description="a registered task (posbench.tasks.names())")
    methods: list[str] = Field(min_length=1, description="method names from the registry, or `all`")
    baseline: str | None = Field(None, description="the method ratios are taken against; one of methods")
    metrics: list[str] = Field(default_factory=list, description="metrics shown in tables and progress lines")
    grid: dict[str, Annotated[list[Scalar], Field(min_length=1)]] = Field(
        min_length=1, description="axis -> values; cases are methods x the cartesian product of the axes"
    )
    settings: dict[str, Any] = Field(default_factory=dict, description="validated against the task's Settings")
    profiles: dict[str, Profile] = Field(default_factory=dict, description="e.g. cpu, gpu")
    launcher: dict[str, Any] = Field(
        default_factory=dict,
        description="--launcher slurm: where and how long each "
        "array task runs (posbench.run.suite.launcher.Launcher); not in the run id",
    )
    page_waits: str | None = Field(
        None,
        max_length=300,
        description="why the results index has no page for this suite yet, when a CPU run cannot give one "
        "(docs/results/README.md says it); not in the run id",
    )


@dataclass
class Suite:
    """A validated suite with one profile applied: what the runner needs."""

    path: Path
    name: str
    description: str
    version: int
    task_name: str  # the name, as the file and run.json carry it
    methods: list[str]
    baseline: str | None
    metrics: list[str]
    grid: dict[str, list[Any]]
    settings: BaseModel  # the task's Settings
    profile: str
    task: Task  # the task itself, asked of the registry once, at loading
    profiles: list[str] = field(default_factory=list)
    launcher: Launcher = field(default_factory=Launcher)  # --launcher slurm's parameters (not in the run id)

    def cases(self, device: str, run_id: str = "", methods_dirs: list[str] | None = None) -> list[CaseSpec]:
        """Grid points outer, methods inner: an interrupted run has every method at the first points."""
        axes = list(self.grid)
        out = []
        for values in itertools.product(*(self.grid[a] for a in axes)):
            for method in self.methods:
                out.append(
                    CaseSpec(
                        suite=self.name,
                        task=self.task_name,
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
        fields = type(self.settings).model_fields
        for later in ("flush_denormal", "train_queries", "needles", "scoring"):  # came later (issues 59, 57, 65): ids stay
            if later in settings and settings[later] == fields[later].default:
                del settings[later]
        blob = json.dumps(
            {"version": self.version, "task": self.task_name, "settings": settings, "grid": self.grid},
            sort_keys=True,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


def _parse(text: str, where: str) -> tuple[Any, KeyLines]:
    try:
        data, node = load_yaml(text)
    except YamlProblem as p:
        raise SuiteError(f"{where}:{p.line}: {p.key}: {p.problem}; allowed: {p.allowed}") from None
    if node is None:
        raise SuiteError(f"{where}:1: <root>: the file is empty; allowed: a mapping of suite keys")
    return data, KeyLines(node)


def find(ref: str | Path) -> Path:
    """A suite by name (``NAME`` -> suites/NAME.yaml) or by path."""
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


def pages_waiting() -> dict[str, str]:
    """Each shipped suite's name -> its ``page_waits`` ("" where it says nothing): what the results
    index says of a suite no published run gives a page yet."""
    return {name: load(name).file.page_waits or "" for name in names()}


@dataclass
class Loaded:
    """A suite file that passed the schema, with its key lines for later messages."""

    path: Path
    file: SuiteFile
    lines: KeyLines
    task: Task | None  # the task (None until checked)


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
        raise error_at(
            where,
            lines,
            (),
            f"the file must be a mapping, got {type(data).__name__}",
            "a mapping of suite keys: " + ", ".join(SuiteFile.model_fields),
        )
    bad = bad_number(data)
    if bad:
        raise error_at(where, lines, *bad)
    try:
        file = SuiteFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        problem, allowed = describe(err, SuiteFile, loc)
        raise error_at(where, lines, loc, problem, allowed) from None
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


def expand_methods(names: list[str], task: Task | None = None) -> list[str]:
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
        raise error_at(
            display_path(loaded.path), loaded.lines, ("task",), f"unknown task {loaded.file.task!r}", ", ".join(tasks.names())
        ) from None


def _check_methods(loaded: Loaded, task: Task | None = None) -> None:
    f, where = loaded.file, display_path(loaded.path)
    own = task.METHODS if task is not None else None  # a task that compares other things (kernel variants)
    _check_method_list(loaded, f.methods, (), own)
    for name, prof in f.profiles.items():
        if prof.methods is not None:
            _check_method_list(loaded, prof.methods, ("profiles", name), own)
    if f.baseline is not None and f.baseline not in expand_methods(f.methods, task):
        raise error_at(where, loaded.lines, ("baseline",), f"{f.baseline!r} is not in methods", ", ".join(f.methods))
    unknown = [m for m in f.metrics if m not in loaded.task.METRICS]
    if unknown:
        i = f.metrics.index(unknown[0])
        raise error_at(where, loaded.lines, ("metrics", i), f"unknown metric {unknown[0]!r}", ", ".join(loaded.task.METRICS))


def _check_method_list(loaded: Loaded, names: list[str], prefix: tuple, own) -> None:
    """Each name is a registered method (or a task variant), or a group (``all``); none twice."""
    from posbench.core import registry

    f, where = loaded.file, display_path(loaded.path)
    for i, name in enumerate(names):
        path = prefix + ("methods", i)
        if name in names[:i]:
            raise error_at(where, loaded.lines, path, f"{name!r} is listed twice", "each method once")
        if name in registry.GROUPS:
            continue
        if own is not None:
            if name not in own:
                close = difflib.get_close_matches(name, list(own), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise error_at(where, loaded.lines, path, f"unknown {f.task} variant {name!r}{hint}", ", ".join(own))
            continue
        try:
            registry.require(name)  # reads the method files: no torch import
        except registry.RegistryError as exc:
            problem = str(exc).split("; known methods:")[0]
            raise error_at(where, loaded.lines, path, problem, ", ".join(registry.names() + list(registry.GROUPS))) from None


def parse_set(items: list[str]) -> dict[str, Any]:
    """``["warmup_steps=3", "grid.seq_len=[64, 128]"]`` -> ``{key: YAML-parsed value}``. Values
    are read with the suite file's loader, so they meet the same rules (no duplicate keys in an
    inline mapping, no alias bombs, finite numbers, 64-bit integers)."""
    out = {}
    for item in items:
        try:
            item.encode("utf-8")
        except UnicodeEncodeError:  # bytes the shell passed that are not UTF-8 (surrogate escapes)
            shown = str(item.encode("utf-8", "backslashreplace"), "utf-8")
            raise SuiteError(f"--set {shown}: not UTF-8 text; allowed: key=value in UTF-8") from None
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SuiteError(
                f"--set {item}: <key>: expected key=value; allowed: a settings key, grid.<axis> or model_overrides.<field>"
            )
        if len(value) > MAX_FILE_BYTES:
            raise SuiteError(f"--set {key}: {key}: value of {len(value)} characters; allowed: at most {MAX_FILE_BYTES}")
        try:
            parsed = load_yaml(value)[0] if value.strip() else ""
        except YamlProblem as p:
            if p.key == "<yaml>":
                raise SuiteError(
                    f"--set {item}: {key}: value is not YAML ({p.problem}); allowed: a YAML scalar, [list] or {{mapping}}"
                ) from None
            raise SuiteError(f"--set {key}: {key}.{p.key}: {p.problem}; allowed: {p.allowed}") from None
        bad = bad_number(parsed)
        if bad:
            path, problem, allowed = bad
            raise SuiteError(f"--set {key}: {key_name((key,) + path)}: {problem}; allowed: {allowed}")
        if key in out:
            raise SuiteError(f"--set {key}: {key}: set twice; allowed: each key once")
        out[key] = parsed
    return out


def resolve(loaded: Loaded, profile: str, sets: dict[str, Any] | None = None, joining: Sequence[str] = ()) -> Suite:
    """Apply ``profile`` (or none: ``default``) and ``--set`` overrides, validate, return a Suite.
    ``joining``: methods ``--methods`` adds to this run (their ``method_options`` are allowed too)."""
    f, where, lines, task = loaded.file, display_path(loaded.path), loaded.lines, loaded.task
    if profile != DEFAULT_PROFILE and profile not in f.profiles:
        raise SuiteError(
            f"{where}: profiles: no profile {profile!r}; allowed: {', '.join(list(f.profiles) or ['(none defined)'])}"
        )
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
    launcher: dict[str, Any] = {}
    launcher_source: dict[str, tuple] = {}
    for key, value in f.launcher.items():
        launcher[key], launcher_source[key] = value, ("launcher", key)
    for key, value in (prof.launcher or {}).items():
        launcher[key], launcher_source[key] = value, ("profiles", profile, "launcher", key)
    for key, value in (sets or {}).items():
        if key.startswith("launcher."):
            launcher[key[len("launcher.") :]], launcher_source[key[len("launcher.") :]] = value, ("--set", key)
        elif key.startswith("grid."):
            axis = key[len("grid.") :]
            grid[axis] = value if isinstance(value, list) else [value]
            grid_source[axis] = ("--set", key)
        elif key.startswith("model_overrides.") and key.count(".") == 1:
            # one field of the model on top of the suite's overrides: --set model_overrides.n_kv_heads=2
            field = key[len("model_overrides.") :]
            merged["model_overrides"] = {**(merged.get("model_overrides") or {}), field: value}
            source["model_overrides"] = ("--set", key)
        else:
            merged[key], source[key] = value, ("--set", key)

    def fail(path: tuple, problem: str, allowed: str) -> SuiteError:
        if path and path[0] == "--set":
            return SuiteError(f"--set {path[1]}: {key_name(path[1:])}: {problem}; allowed: {allowed}")
        return error_at(where, lines, path, problem, allowed)

    def validated(model, values: dict, sources: dict, block: str):
        """``values`` as a ``model``; its first error names where the bad value came from."""
        try:
            return model.model_validate(values)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = tuple(err["loc"])
            problem, allowed = describe(err, model, loc)
            base = sources.get(loc[0], (block, loc[0])) if loc else (block,)
            raise fail(base + loc[1:], problem, allowed) from None

    settings = validated(task.Settings, merged, source, "settings")
    launch = validated(Launcher, launcher, launcher_source, "launcher")
    _check_grid(grid, grid_source, task.Params, fail)
    methods = expand_methods(prof.methods or f.methods, task)  # a group (all) as its methods: options name them
    check_across(settings, source, grid, grid_source, Methods(methods, list(joining)), task, fail)
    return Suite(
        path=loaded.path,
        name=f.name,
        description=f.description,
        version=f.version,
        task_name=f.task,
        methods=expand_methods(prof.methods or f.methods, task),
        baseline=f.baseline,
        metrics=list(f.metrics),
        grid=grid,
        settings=settings,
        profile=profile,
        task=task,
        profiles=list(f.profiles),
        launcher=launch,
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
                problem, allowed = describe(err, params, ())
                raise fail(source[axis] + (i,), problem, allowed) from None
            if value in values[:i]:  # the same case would run twice
                raise fail(source[axis] + (i,), f"{value!r} is listed twice", "each value once per axis")
    missing = [a for a, info in fields.items() if info.is_required() and a not in grid]
    if missing:
        raise fail(("grid",), f"missing grid axis {missing[0]!r}", ", ".join(fields))

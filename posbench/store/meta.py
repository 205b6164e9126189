"""``run.json`` (what was run: ``RunMeta``) and ``env.json`` (where it ran), written and read
within bounds."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from posbench.core.files import atomic_write_text
from posbench.store import bounds
from posbench.store.bounds import RowsError

ENV_FILE = "env.json"
RUN_FILE = "run.json"
RUN_FORMAT = 2  # run.json's own version: bump when its keys change meaning
# A run.json without "format" was written before it had one: format 1, whose ``methods`` were the
# suite's (also those a narrowed --methods never ran); from format 2 they are the methods that ran.
FIRST_FORMAT = 1
# Used when a run was written before run.json existed (format 0): the suites' old default.
LEGACY_BASELINE = "sinusoidal"


@dataclass(frozen=True)
class Join:
    """Methods that joined a finished timed run (``posbench.run.schedule.joining``), recorded when
    the join starts: the grid points they joined (each point's params), when it started (UTC, as
    rows' ``started_at``: rows started since are the join's), and whether it re-measures those
    points with every method there (``paired``) or runs the newcomers alone (``--unpaired``)."""

    methods: list[str]
    points: list[dict]
    started_at: str
    paired: bool = True


@dataclass
class RunMeta:
    """What ``run.json`` records: enough to lay out tables and read ratios without the suite file.
    ``methods``: the methods that ran in the folder (format 2; format 1 listed the suite's),
    ``joins``: the joins of the run (``Join``), oldest first."""

    suite: str
    version: int
    task: str
    baseline: str | None
    methods: list[str]
    metrics: list[str]
    settings: dict = field(default_factory=dict)
    grid: dict = field(default_factory=dict)
    profile: str = ""
    device: str = ""
    run_id: str = ""
    posbench_version: str = ""
    written_at: str = ""
    format: int = RUN_FORMAT
    joins: list[Join] = field(default_factory=list)

    @classmethod
    def of_suite(cls, suite, device: str, run_id: str) -> RunMeta:
        """The record of a resolved ``posbench.run.suite.Suite`` about to run on ``device``."""
        from posbench import __version__

        settings = suite.settings.model_dump() if hasattr(suite.settings, "model_dump") else dict(suite.settings)
        return cls(
            suite=suite.name,
            version=suite.version,
            task=suite.task_name,
            baseline=suite.baseline,
            methods=list(suite.methods),
            metrics=list(suite.metrics),
            settings=settings,
            grid={k: list(v) for k, v in suite.grid.items()},
            profile=suite.profile,
            device=device,
            run_id=run_id,
            posbench_version=__version__,
            written_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )


def write_run_meta(run_dir: str | Path, meta: RunMeta, command=()) -> Path:
    """``run_dir/run.json``, written atomically (a reader sees the old file or the new one), with
    ``command``: the bench.py command line that ran it (``run_command``; status re-runs it)."""
    record = dict(asdict(meta), command=list(command))
    return atomic_write_text(Path(run_dir) / RUN_FILE, json.dumps(record, indent=2, default=str) + "\n")


def run_command(run_dir: str | Path) -> list[str]:
    """run.json's ``command`` (``["python", "bench.py", ...]``); [] when it records none."""
    try:
        data = _read_json(Path(run_dir) / RUN_FILE)
    except ValueError:  # RowsError: status says the problem where it reads run.json itself
        return []
    command = data.get("command") if isinstance(data, dict) else None
    return command if isinstance(command, list) and all(isinstance(a, str) for a in command) else []


def _read_json(path: Path) -> Any:
    """A stored JSON file (run.json, env.json), read within bounds; missing: ``...`` (Ellipsis)."""
    data = bounds.read_small(path)
    if data is None:
        return ...
    try:
        text = str(data, "utf-8")
    except UnicodeDecodeError:
        raise RowsError(f"{path}: not UTF-8 text") from None
    try:
        return bounds.loads(text)
    except bounds.NotJson as exc:
        line = f":{exc.lineno}" if exc.lineno else ""
        raise RowsError(f"{path}{line}: {exc}") from None


_STR, _LIST_OF_STR = "a string", "a list of strings"
_META_TYPES = {
    "suite": _STR,
    "version": "a whole number",
    "task": _STR,
    "baseline": "a string or null",
    "methods": _LIST_OF_STR,
    "metrics": _LIST_OF_STR,
    "settings": "an object",
    "grid": "an object of lists",
    "profile": _STR,
    "device": _STR,
    "run_id": _STR,
    "posbench_version": _STR,
    "written_at": _STR,
    "format": "a whole number",
    "joins": "a list of objects",
}
_JOIN_TYPES = {"methods": _LIST_OF_STR, "points": "a list of objects", "started_at": _STR, "paired": "true or false"}


def _meta_type_ok(key: str, value: Any) -> bool:
    return _meta_type_ok_as(_META_TYPES[key], value)


def _meta_type_ok_as(kind: str, value: Any) -> bool:
    if kind == _STR:
        return isinstance(value, str)
    if kind == "a whole number":
        return isinstance(value, int) and not isinstance(value, bool) and abs(value) < bounds.MAX_INT
    if kind == "a string or null":
        return value is None or isinstance(value, str)
    if kind == _LIST_OF_STR:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "an object":
        return isinstance(value, dict)
    if kind == "a list of objects":
        return isinstance(value, list) and all(isinstance(v, dict) for v in value)
    if kind == "true or false":
        return isinstance(value, bool)
    return isinstance(value, dict) and all(isinstance(v, list) for v in value.values())


def read_run_meta(run_dir: str | Path) -> RunMeta | None:
    """The run's ``run.json``, or None for a run written before posbench kept one. A file that is
    not a regular file, not UTF-8, not JSON, or whose keys have the wrong types is a one-line
    ``RowsError`` naming it and the key."""
    path = Path(run_dir) / RUN_FILE
    data = _read_json(path)
    if data is ...:
        return None
    if not isinstance(data, dict):
        raise RowsError(f"{path}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in ("suite", "version", "task", "baseline", "methods", "metrics") if k not in data]
    if missing:
        raise RowsError(f"{path}: no {missing[0]!r}; run.json needs suite, version, task, baseline, methods, metrics")
    if not isinstance(data["methods"], list) or not isinstance(data["metrics"], list):
        raise RowsError(f"{path}: methods and metrics must be lists")
    for key, kind in _META_TYPES.items():
        if key in data and not _meta_type_ok(key, data[key]):
            raise RowsError(f"{path}: {key}: expected {kind}, got {type(data[key]).__name__}")
    fields = {k: v for k, v in data.items() if k in _META_TYPES}
    fields.update(format=data.get("format", FIRST_FORMAT), joins=[_join(path, i, j) for i, j in enumerate(data.get("joins", []))])
    return RunMeta(**fields)


def _join(path: Path, i: int, record: dict) -> Join:
    """run.json's ``joins[i]`` as a ``Join``; a key missing or of the wrong type is one line."""
    for key, kind in _JOIN_TYPES.items():
        if key not in record:
            raise RowsError(f"{path}: joins[{i}]: no {key!r}; a join needs {', '.join(_JOIN_TYPES)}")
        if not _meta_type_ok_as(kind, record[key]):
            raise RowsError(f"{path}: joins[{i}].{key}: expected {kind}, got {type(record[key]).__name__}")
    return Join(**{k: record[k] for k in _JOIN_TYPES})


def read_env(run_dir: str | Path) -> dict:
    """The run's ``env.json``; ``{}`` when there is none or it holds no object."""
    env = _read_json(Path(run_dir) / ENV_FILE)
    return env if isinstance(env, dict) else {}
